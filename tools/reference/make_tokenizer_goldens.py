#!/usr/bin/env python3
"""Reference token ids for src/tokenizer tests, from HF `tokenizers` (PyPI, 0.23.2).

Assembles a deterministic text corpus (English, code in several languages, CJK, kana,
Korean, Arabic/Hebrew/Devanagari/Thai, emoji and ZWJ sequences, combining marks, digit runs,
whitespace runs incl. CR LF and tabs, every added-token literal, very long words, a Unicode
code-point sweep and seeded random mixes), encodes every text with the shipped tokenizers and
writes one JSON line per (version, special, text) (plain-BPE records only for texts with
added-token literals and the random mixes):

  {"version": "deepseek-v4.1", "special": true, "text": ..., "ids": [...], "decoded": ...}

`special` true = HF encode(text, add_special_tokens=False) (added tokens recognised);
false = the same with every added token disabled (HF `encode_special_tokens` only disables
special ones, so plain-BPE ids are made by pre-tokenizing and running the BPE model directly).

Usage (scratch venv):
  python3 -m venv /tmp/tokvenv && /tmp/tokvenv/bin/pip install tokenizers==0.23.2
  /tmp/tokvenv/bin/python tools/reference/make_tokenizer_goldens.py \
      --out src/tokenizer/testdata/hf_goldens.jsonl
"""
import argparse
import json
import os
import random

import tokenizers
from tokenizers import Tokenizer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ENGLISH = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog. It's 3:45pm; don't you think?",
    "I'm sure you'll agree: we've seen it all -- \"quotes\", 'single', (parens) [brackets] {braces}.",
    "  Leading spaces and trailing spaces   ",
    "UPPER lower MiXeD CamelCaseWord snake_case_word kebab-case-word",
    "e.g. i.e. etc... Mr. Smith's co-worker (aged 42) earned $1,234,567.89 in 2023!!!",
    "Email: someone@example.com, URL: https://example.org/path?q=1&r=two#frag",
]

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v.size() > 2 ? 0 : 1;\n}\n",
    "fn main() {\n    let xs: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", xs);\n}\n",
    "const f = async (a, b) => { await fetch(`/api/${a}?b=${b}`); return a ?? b; };\r\n",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "<html>\n  <body class=\"main\">\n    <p>Hello &amp; welcome</p>\n  </body>\n</html>",
    '{"key": [1, 2.5, -3e10, true, null], "nested": {"a": "b\\n"}}',
    "#!/bin/bash\nfor f in *.txt; do\n  echo \"$f\" | sed -e 's/a/b/g' >> out.log 2>&1\ndone\n",
    "    x = [i**2 for i in range(100) if i % 3 == 0]  # comment\n\n\n",
]

SCRIPTS = [
    "你好，世界！今天天气很好。我们去公园散步吧。",
    "人工智能（AI）正在改变世界，2024年是关键的一年。",
    "日本語のテキスト：ひらがな、カタカナ、漢字を含みます。ｶﾀｶﾅ（半角）もあります。",
    "東京タワーは333メートルです。ゐゑヰヱ・ー〜",
    "한국어 텍스트입니다. 안녕하세요!",
    "العربية: مرحبا بالعالم، كيف حالك؟ ١٢٣٤٥",
    "עברית: שָׁלוֹם עוֹלָם",
    "हिन्दी: नमस्ते दुनिया, यह एक परीक्षण है।",
    "ภาษาไทย: สวัสดีชาวโลก",
    "Ελληνικά: Γειά σου Κόσμε· Русский: Привет, мир! Ўзбек",
    "Tiếng Việt: Xin chào thế giới. Ngôn ngữ có dấu.",
    "繁體中文與简体中文混合 mixed with English and 数字123。",
]

EMOJI = [
    "👨‍👩‍👧‍👦 family, 👩🏽‍💻 coder, 🏳️‍🌈 flag, 🇯🇵🇺🇸 flags, 1️⃣ keycap",
    "😀😃😄😁😆😅🤣😂🙂🙃😉😊😇🥰😍🤩",
    "❤️‍🔥 ✊🏿 🧑‍🤝‍🧑 👍🏻👍🏼👍🏽👍🏾👍🏿",
    "text🚀with🎉emoji✨inside",
    "𝕳𝖊𝖑𝖑𝖔 𐌰𐌱𐌲 𝟙𝟚𝟛 🀄 ",
]

COMBINING = [
    "e\u0301 a\u0300 o\u0308 n\u0303 — café vs cafe\u0301",
    "Z\u0351\u0352\u0353a\u0354\u0355l\u0356\u0357g\u0358\u0359o\u035a",
    "\u0301\u0301 leading combining marks \u20dd\u20de",
    "क्षत्रिय श्री ज्ञ",
]

DIGITS = [
    "1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890",
    "3.14159265358979323846264338327950288419716939937510",
    "version 10.0.19041, ip 192.168.0.1, phone +1-555-0100",
    "abc123def4567ghi89",
    "０１２３４５６７８９ ¹²³ ½¾ Ⅷ Ⅻ ٠١٢٣٤٥٦٧٨٩ ۱۲۳",
    "00000000000000000000000000000001",
]

WHITESPACE = [
    "a  b   c    d",
    "tabs\there\t\tand\t\t\tmore",
    "line1\r\nline2\r\n\r\nline4\n\n\n",
    "\n\n\n   \n\t \n",
    "trailing   ",
    "   ",
    " \t \r\n \u00a0 \u3000 \u2003 \u180e \u200b \ufeff \u0085 \u2028 \u2029 x",
    "\x1c\x1d\x1e\x1f \x0b \x0c \x00 \x07 \x7f",
    "word\u00a0word\u202fword\u205fword\u1680word",
    "a\u180e\u180eb \u180e c\u180e",
    "  \u3000\u3000漢字  ",
    "\r\r\n\n\r",
    "x \n y\t\n z \r\n",
]

LONG = [
    "a" * 3000,
    "supercalifragilisticexpialidocious" * 40,
    "https://example.com/" + "very-long-path-segment/" * 60,
    "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo0123456789+/" * 30,
    "9" * 500,
    "汉" * 800,
    "😀" * 300,
    " " * 1000 + "x",
    "\t" * 300 + "\n" * 300,
    "ab" * 1500,
    "-" * 400 + "=" * 400,
]


def special_literals(tok):
    added = sorted(tok.get_added_tokens_decoder().items())
    contents = [t.content for _, t in added]
    texts = []
    for i in range(0, len(contents), 40):
        texts.append("".join(contents[i:i + 40]))
    named = [c for c in contents if "place_holder" not in c and "place▁holder" not in c]
    texts.append(" ".join(named))
    texts.append("x".join(named))
    texts += [
        "<｜User｜>Hi<｜Assistant｜><think>reasoning</think>answer<｜end▁of▁sentence｜>",
        "<｜begin▁of▁sentence｜><｜begin▁of▁sentence｜>",
        "<|image|> <｜image｜> <｜image > <｜User｜ <｜User｜>> <<｜User｜>>",
        "<｜DSML｜ invoke name=\"f\">｜DSML｜</｜DSML｜ invoke><dsml:x></dsml:x>",
        "<｜place▁holder▁no▁1｜><｜place▁holder▁no▁1｜x <｜place▁holder▁no▁12｜>",
        "<|EOT|><|EOT|<|place_holder_mm_span_0021|><|place_holder_mm_span_0442|>",
        "<｜System｜>sys<｜image2｜><｜table｜><｜/table>｜<｜td｜>",
        "text<think>\n\n</think>\n\nmore",
    ]
    return texts


def codepoint_sweep(step, end=0x32000):
    cps = [cp for cp in range(0x80, end, step) if not 0xD800 <= cp <= 0xDFFF]
    seps = [" ", "a", "1", "!", "", "\n", "字"]
    texts = []
    for i in range(0, len(cps), 60):
        parts = []
        for j, cp in enumerate(cps[i:i + 60]):
            parts.append(chr(cp) + seps[(i + j) % len(seps)])
        texts.append("".join(parts))
    return texts


def random_mixes(rng, count):
    pieces = (list("abcXYZ019 _-.,;:!?'\"()[]{}<>/\\|@#$%^&*+=~`") +
              ["\t", "\n", "\r\n", "  ", "\u00a0", "\u3000", "\u2003", "\u180e", "\u200d",
               "中", "文", "字", "ひ", "カ", "ｶ", "한", "ع", "\u0301", "😀", "🏽", "👨‍👩‍👧",
               "Ġ", "▁", "｜", "<｜User｜>", "<think>", "｜DSML｜", "<｜", "｜>", "Hello",
               " world", "123", "4567", "٣", "Ⅷ", "½", "𝖑", "\x00", "\x1f", "\x85"])
    texts = []
    for _ in range(count):
        n = rng.randint(1, 40)
        texts.append("".join(rng.choice(pieces) for _ in range(n)))
    return texts


def plain_bpe_ids(tok, text):
    """Plain BPE (no added-token matching): pre-tokenize, then the model on each piece."""
    pieces = tok.pre_tokenizer.pre_tokenize_str(text)
    ids = []
    for piece, _ in pieces:
        ids += [t.id for t in tok.model.tokenize(piece)]
    return ids


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(REPO, "src/tokenizer/testdata/hf_goldens.jsonl"))
    parser.add_argument("--assets", default=os.path.join(REPO, "assets/tokenizers"))
    parser.add_argument("--full-sweep", action="store_true",
                        help="instead: every code point U+0080..U+10FFFF in context (large; "
                             "not committed; run the test with DEEPINFER_TOKENIZER_GOLDENS)")
    args = parser.parse_args()
    assert tokenizers.__version__ == "0.23.2", tokenizers.__version__
    rng = random.Random(20261130)
    toks = {v: Tokenizer.from_file(os.path.join(args.assets, v, "tokenizer.json"))
            for v in ("deepseek-v4.1", "deepseek-v4")}
    # (version, text, also_plain): also_plain adds a record encoded without added tokens.
    if args.full_sweep:
        jobs = [("deepseek-v4.1", t, False) for t in codepoint_sweep(1, 0x110000)]
    else:
        common = (ENGLISH + CODE + SCRIPTS + EMOJI + COMBINING + DIGITS + WHITESPACE + LONG +
                  codepoint_sweep(97))
        mixes = random_mixes(rng, 250)
        jobs = [("deepseek-v4.1", t, False) for t in common]
        jobs += [("deepseek-v4.1", t, True) for t in special_literals(toks["deepseek-v4.1"]) + mixes]
        jobs += [("deepseek-v4", t, True)
                 for t in special_literals(toks["deepseek-v4"]) + random_mixes(rng, 40)]
    n = 0
    with open(args.out, "w", encoding="utf-8") as out:
        for version, text, also_plain in jobs:
            tok = toks[version]
            for special in (True, False) if also_plain else (True,):
                if special:
                    ids = tok.encode(text, add_special_tokens=False).ids
                else:
                    ids = plain_bpe_ids(tok, text)
                record = {"version": version, "special": special, "text": text, "ids": ids}
                if special:
                    record["decoded"] = tok.decode(ids, skip_special_tokens=False)
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                n += 1
    print(f"wrote {n} records to {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
    main()
