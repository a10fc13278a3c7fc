"""A tiny chat model made locally, for tests and demos of the vLLM tier: no download, no GPU.

`make_tiny_model(path)` writes a Llama-architecture `config.json`, a byte-level
BPE tokenizer trained here on a small built-in corpus (with ChatML turn
markers and a chat template that renders tools, Hermes `<tool_call>` blocks
and `role: tool` messages), and random weights as safetensors, so vLLM and a
plain transformers forward pass load the *same* weights. The model is
untrained: what it says is noise, but its token ids and log-probabilities
are real, which is what the token-fidelity tests need.

    python -m gym_serve.models.tiny_model /tmp/tiny-model
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

__all__ = ["CHAT_TEMPLATE", "make_tiny_model"]

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MARKUP = ["<tool_call>", "</tool_call>", "<think>", "</think>"]

# Each turn is `\n<|im_start|>role\n...<|im_end|>`: an assistant turn ends exactly at its stop token, so the
# next prompt extends the sampled ids by what follows (see gym_serve/wire/tokens.py).
CHAT_TEMPLATE = """\
{%- set first = messages[0] if messages else none -%}
{%- if tools -%}
{{- '<|im_start|>system\\n' -}}
{%- if first and first.role == 'system' -%}{{- first.content + '\\n\\n' -}}{%- endif -%}
{{- '# Tools\\n<tools>' -}}
{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\\n</tools>\\nCall a tool with <tool_call>{"name": NAME, "arguments": ARGS}</tool_call>.<|im_end|>' -}}
{%- elif first and first.role == 'system' -%}
{{- '<|im_start|>system\\n' + first.content + '<|im_end|>' -}}
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'system' and loop.first -%}
{%- elif m.role == 'assistant' -%}
{{- '\\n<|im_start|>assistant\\n' + (m.content or '') -}}
{%- for tc in m.tool_calls or [] -%}
{{- '<tool_call>\\n{"name": "' + tc.function.name + '", "arguments": ' + tc.function.arguments + '}\\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>' -}}
{%- else -%}
{{- '\\n<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '\\n<|im_start|>assistant\\n' -}}{%- endif -%}
"""

_CORPUS = [
    "You are a helpful personal assistant. What's the weather like in San Francisco today?",
    '{"city": "San Francisco", "weather_description": "The weather in San Francisco is cold."}',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    "<think>I should call the tool first, then answer.</think> It is sunny and warm in Phoenix.",
    "Add 2 then add 5 then get the count. The counter is now 10. Done.",
    "def solve(n):\n    return sum(range(n + 1))\nprint(solve(10))",
    "SELECT name, price FROM products WHERE price > 10 ORDER BY price;",
    "The answer is \\boxed{42}. Answer: B. True or false? Yes, no, maybe.",
    '# Tools\n<tools>\n</tools>\nCall a tool with {"name": NAME, "arguments": ARGS}.',
]


def make_tiny_model(path: str | Path, *, vocab_size: int = 1024, seed: int = 0) -> Path:
    """Write the tiny model to `path` and return the path; an existing model there is reused.

    Head size 64: the smallest vLLM's CPU attention supports.
    """
    path = Path(path)
    if (path / "model.safetensors").exists() and (path / "tokenizer.json").exists():
        return path
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = _train_tokenizer(vocab_size)
    tokenizer.save_pretrained(path)
    _write_weights(path, len(tokenizer), tokenizer.convert_tokens_to_ids("<|im_end|>"), seed)
    return path


def _train_tokenizer(vocab_size: int):  # noqa: ANN202 (transformers type, imported lazily)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(_CORPUS * 20, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None
    )
    tokenizer.add_tokens(MARKUP)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def _write_weights(path: Path, vocab: int, eos_id: int, seed: int) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=32768,  # room for a coding CLI's prompts (the gateway tests): RoPE, no scaling
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos_id,
        pad_token_id=0,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # sharper than the default init, so sampling is not uniform noise
        model.lm_head.weight.normal_(0.0, 0.5)
    model.save_pretrained(path, safe_serialization=True)
    (path / "generation_config.json").write_text(json.dumps({"eos_token_id": eos_id}))


if __name__ == "__main__":
    print(make_tiny_model(sys.argv[1] if len(sys.argv) > 1 else "tiny-model"))
