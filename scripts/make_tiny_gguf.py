"""Make a tiny llama-architecture model here, offline and reproducibly: a byte-level BPE tokenizer trained with
`tokenizers` on local text, a chat template, and seeded random f32 weights. It serves nonsense fast, which is all a
chaos run needs of a model: real engine code paths (tokenizing, batching, the KV cache, streaming, errors).

    python scripts/make_tiny_gguf.py OUT.gguf TEXT_DIR        a GGUF for llama.cpp (needs gguf, tokenizers, numpy)
    python scripts/make_tiny_gguf.py --hf OUT_DIR TEXT_DIR    a Hugging Face folder for vLLM: config.json and the
                                                              tokenizer (vLLM makes the weights: --load-format dummy)

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


def main_hf(out_dir: str, text_dir: str) -> None:
    import json

    os.makedirs(out_dir, exist_ok=True)
    tok = train_tokenizer(text_dir)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
              "intermediate_size": FFN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "num_key_value_heads": KV_HEADS, "head_dim": HIDDEN // HEADS, "vocab_size": VOCAB,
              "max_position_embeddings": CONTEXT, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "float32",
              "bos_token_id": tok.token_to_id("<|begin_of_text|>"), "eos_token_id": tok.token_to_id("<|im_end|>")}
    tconf = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
             "eos_token": "<|im_end|>", "pad_token": "<|end_of_text|>", "chat_template": CHAT_TEMPLATE,
             "model_max_length": CONTEXT, "add_bos_token": False, "clean_up_tokenization_spaces": False}
    for name, doc in (("config.json", config), ("tokenizer_config.json", tconf),
                      ("generation_config.json", {"bos_token_id": config["bos_token_id"],
                                                  "eos_token_id": config["eos_token_id"]})):
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(doc, f, indent=1)
    print(f"wrote {out_dir}: config.json, tokenizer.json (vocabulary {tok.get_vocab_size()})")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--hf":
        main_hf(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3:
        main(sys.argv[1], sys.argv[2])
    else:
        raise SystemExit(__doc__)
