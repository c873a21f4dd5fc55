"""Make a tiny llama-architecture GGUF model here, offline and reproducibly: a byte-level BPE tokenizer trained with
`tokenizers` on local text, a chat template, and seeded random f32 weights. It serves nonsense fast, which is all a
chaos run needs of a model: real engine code paths (tokenizing, batching, the KV cache, streaming, errors).

    python scripts/make_tiny_gguf.py OUT.gguf TEXT_DIR       (needs gguf, tokenizers, numpy: scripts/engines.sh)

Shape: hidden 128, 2 layers, 4 heads (head_dim 32), 2 KV heads, FFN 256, vocabulary 2,000, context 2,048.
"""

from __future__ import annotations

import glob
import os
import sys

import numpy as np

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, VOCAB, CONTEXT = 128, 2, 4, 2, 256, 2000, 2048
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def train_tokenizer(text_dir: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    files = sorted(glob.glob(os.path.join(text_dir, "**", "*.md"), recursive=True))
    if not files:
        raise SystemExit(f"no *.md under {text_dir} to train the tokenizer on")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, trainer)
    return tok


def main(out: str, text_dir: str) -> None:
    import json

    import gguf

    tok = train_tokenizer(text_dir)
    model = json.loads(tok.to_str())["model"]
    vocab = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    n = len(tokens)
    types = [gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens]

    w = gguf.GGUFWriter(out, "llama")
    w.add_name("chaos-tiny")
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|begin_of_text|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    rng = np.random.default_rng(0)
    kv = KV_HEADS * (HIDDEN // HEADS)

    def t(name: str, rows: int, cols: int | None = None, scale: float = 0.02):
        shape = (rows,) if cols is None else (rows, cols)
        data = np.ones(shape, np.float32) if cols is None else (rng.standard_normal(shape) * scale).astype(np.float32)
        w.add_tensor(name, data)

    t("token_embd.weight", n, HIDDEN)
    for i in range(LAYERS):
        t(f"blk.{i}.attn_norm.weight", HIDDEN)
        t(f"blk.{i}.attn_q.weight", HIDDEN, HIDDEN)
        t(f"blk.{i}.attn_k.weight", kv, HIDDEN)
        t(f"blk.{i}.attn_v.weight", kv, HIDDEN)
        t(f"blk.{i}.attn_output.weight", HIDDEN, HIDDEN)
        t(f"blk.{i}.ffn_norm.weight", HIDDEN)
        t(f"blk.{i}.ffn_gate.weight", FFN, HIDDEN)
        t(f"blk.{i}.ffn_up.weight", FFN, HIDDEN)
        t(f"blk.{i}.ffn_down.weight", HIDDEN, FFN)
    t("output_norm.weight", HIDDEN)
    t("output.weight", n, HIDDEN)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out}: {os.path.getsize(out) / 1e6:.1f} MB, vocabulary {n}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2])
