import csv,sys
f=lambda s: float(s.replace(',',''))
rows=list(csv.reader(open(sys.argv[1])))
h=[i for i,r in enumerate(rows) if r and r[0]=="ID"]
if not h: print("no csv"); sys.exit()
hdr=rows[h[0]]
for r in rows[h[0]+2:]:
    if len(r)!=len(hdr): continue
    d=dict(zip(hdr,r)); t=f(d['gpu__time_duration.sum'])/1e3; gb=f(d['dram__bytes_read.sum'])/1e9
    rd=f(d['lts__t_sectors_srcunit_tex_op_read.sum'])*32/1e9; ms=f(d['lts__t_sectors_srcunit_tex_op_read_lookup_miss.sum'])*32/1e9
    print("  grid %s %.1f us DRAM %.3f GB (%.2f TB/s) L2 read %.3f GB miss %.3f GB req %.1fM issue %s" % (d['Grid Size'], t, gb, gb/t*1e3, rd, ms, f(d['lts__t_requests_srcunit_tex_op_read.sum'])/1e6, d['smsp__issue_active.avg.pct_of_peak_sustained_active']))
