"""Write a tiny Llama model directory that vLLM can serve with random weights.

usage: python make_tiny_model.py OUT_DIR [--hidden-size 768] [--layers 4]
(run with the vLLM environment's Python: it needs the `tokenizers` package, which vLLM
depends on)

Nothing is downloaded. The directory holds the architecture (config.json), a byte-level BPE
tokenizer trained here on a few sentences, its config with a chat template (so
/v1/chat/completions works), and generation defaults. The engine is started with
`--load-format dummy`, which fills the weights with random values: the output is noise, but
batching, KV-cache paging, preemption, streaming and metrics are the real engine's.

Default size: 4 layers, hidden 768, 12 heads of 64 (the CPU attention kernels do not take a
head size of 16), about 30 M parameters. That is small enough to load in seconds and large
enough that one engine step costs more than the Python around it, so the engine, not its
HTTP front end, is what saturates: throughput falls when the KV cache overflows and requests
are preempted, as on a GPU server. The byte-level tokenizer makes roughly one token per byte
of text it was not trained on (one per digit: no digit merges), so prompt lengths should be
read from the engine's `usage`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
VOCAB_SIZE = 512
HEAD_DIM = 64

CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

TRAINING_TEXT = [
    "A gateway in front of an inference server keeps latency inside a target.",
    "Continuous batching lets requests join and leave the batch between steps.",
    "The key value cache is split into blocks of one hundred and twenty eight tokens.",
    "When the cache is full the scheduler preempts a request and recomputes it later.",
    "Hello world, this is a small model with random weights for testing on a CPU.",
    "<|system|> <|user|> <|assistant|> The quick brown fox jumps over the lazy dog.",
]


def build_tokenizer() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return tokenizer


def model_config(
    vocab_size: int, bos_id: int, eos_id: int, pad_id: int, hidden: int, layers: int
) -> dict[str, object]:
    heads = hidden // HEAD_DIM
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": hidden * 8 // 3 // 64 * 64,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "vocab_size": vocab_size,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "torch_dtype": "bfloat16",
    }


def write(out_dir: Path, hidden: int, layers: int) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer.save(str(out_dir / "tokenizer.json"))
    bos_id = tokenizer.token_to_id(BOS)
    eos_id = tokenizer.token_to_id(EOS)
    pad_id = tokenizer.token_to_id(PAD)
    files: dict[str, object] = {
        "config.json": model_config(tokenizer.get_vocab_size(), bos_id, eos_id, pad_id, hidden, layers),
        "tokenizer_config.json": {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": BOS,
            "eos_token": EOS,
            "pad_token": PAD,
            "add_bos_token": False,
            "model_max_length": 2048,
            "chat_template": CHAT_TEMPLATE,
        },
        "special_tokens_map.json": {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD},
        "generation_config.json": {
            "bos_token_id": bos_id,
            "eos_token_id": eos_id,
            "pad_token_id": pad_id,
        },
    }
    for name, content in files.items():
        (out_dir / name).write_text(json.dumps(content, indent=2) + "\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Write a tiny Llama model directory.")
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--hidden-size", type=int, default=768, help="a multiple of 64")
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args(argv)
    if args.hidden_size % HEAD_DIM:
        parser.error(f"--hidden-size must be a multiple of {HEAD_DIM}")
    write(args.out_dir, args.hidden_size, args.layers)
    print(f"tiny Llama model written to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
