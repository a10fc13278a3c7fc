"""Log-probs recomputed with transformers under a forced tool call's grammar, for the vLLM tier's tests."""

from __future__ import annotations

from typing import Any

import torch


def constrained_logprobs(
    policy: Any,
    tokenizer: Any,
    episode: list[int],
    ranges: list[tuple[int, int]],
    row: dict[str, Any],
    tools: list[dict[str, Any]],
) -> torch.Tensor:
    """The log-probs of the generated tokens recomputed with transformers, under the same constraint the sampler
    had: rows that force a tool call (`tool_choice: required`) make each step's distribution the model's
    renormalised over the tokens the forced-call grammar allows there (xgrammar, vLLM's structured-output backend).
    `tools`: the environment's, for rows that name none."""
    import xgrammar

    from gym_serve.wire.hermes import forced_tool_call_regex

    params = row["responses_create_params"]
    regex = forced_tool_call_regex({**params, "tools": params.get("tools") or tools})
    assert regex is not None
    vocab = policy.config.vocab_size
    compiled = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab))
    grammar = compiled.compile_regex(regex)
    with torch.no_grad():
        logits = policy(torch.tensor([episode])).logits[0].float()
    result = []
    for start, end in ranges:
        matcher = xgrammar.GrammarMatcher(grammar)
        for position in range(start, end):
            step = logits[position - 1].clone()[None]
            mask = xgrammar.allocate_token_bitmask(1, vocab)
            matcher.fill_next_token_bitmask(mask)
            xgrammar.apply_token_bitmask_inplace(step, mask)
            result.append(step[0].log_softmax(-1)[episode[position]].item())
            matcher.accept_token(episode[position])
    return torch.tensor(result)
