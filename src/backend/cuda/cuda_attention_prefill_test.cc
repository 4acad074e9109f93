// GPU tests of the prefill sparse attention kernel (k_attention_prefill.cu). (Being written.)
