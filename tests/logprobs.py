"""Sampled log-probs recomputed in float32 with transformers, under the constraint each call was sampled with.

A call sampled under structured outputs (a forced tool call's regex, a JSON schema) was drawn from the
model's distribution masked to what the grammar allowed at each step, and the engine reports those
log-probs; the recompute applies the same mask (xgrammar, vLLM's structured-output backend, compiled as
vLLM compiles it: JSON without free whitespace, as the test engines are configured).
"""

from __future__ import annotations

import json
from typing import Any

import torch


class Recompute:
    """The tiny model in float32 and its tokenizer, for `max_delta`."""

    def __init__(self, model_path: Any) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self._compiler: Any = None

    def max_delta(self, calls: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> tuple[int, float]:
        """(tokens compared, max |Δ logp|) over the calls' sampled tokens."""
        diffs: list[float] = []
        for call, bundle in calls:
            assert bundle is not None, f"call {call['number']} has no token bundle"
            prompt, generated = bundle["prompt_token_ids"], bundle["generation_token_ids"]
            ours = self.logprobs(prompt, generated, call.get("constraint"))
            diffs += (ours - torch.tensor(bundle["generation_log_probs"])).abs().tolist()
        return len(diffs), max(diffs, default=0.0)

    def logprobs(self, prompt: list[int], generated: list[int], constraint: dict[str, Any] | None) -> torch.Tensor:
        with torch.no_grad():
            logits = self.model(torch.tensor([prompt + generated])).logits[0, len(prompt) - 1 : -1].float()
        if constraint is not None:
            logits = self._masked(logits, generated, constraint)
        return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(generated)[:, None])[:, 0]

    def _masked(self, logits: torch.Tensor, generated: list[int], constraint: dict[str, Any]) -> torch.Tensor:
        import xgrammar

        vocab = self.model.config.vocab_size
        if self._compiler is None:
            info = xgrammar.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=vocab)
            self._compiler = xgrammar.GrammarCompiler(info)
        if "regex" in constraint:
            grammar = self._compiler.compile_regex(constraint["regex"])
        else:
            schema = json.dumps(constraint["json"])
            grammar = self._compiler.compile_json_schema(schema, any_whitespace=False, separators=(",", ":"))
        matcher = xgrammar.GrammarMatcher(grammar)
        masked = logits.clone()
        for step, token in enumerate(generated):
            mask = xgrammar.allocate_token_bitmask(1, vocab)
            matcher.fill_next_token_bitmask(mask)
            row = masked[step : step + 1]
            xgrammar.apply_token_bitmask_inplace(row, mask)
            masked[step] = row[0]
            matcher.accept_token(token)
        return masked
