"""gym-serve's TRL hook under Unsloth's GRPO recipe, on CPU, in Unsloth's own environment (`scripts/trainer_envs.py`).

Unsloth's GRPO is TRL's `GRPOTrainer` over a model Unsloth loads and patches. This loads the model with
Unsloth's `FastLanguageModel` (on a machine without a GPU, Unsloth selects its CPU backend: stock transformers,
PEFT and TRL), adds LoRA adapters with `get_peft_model`, and trains with the `GRPOConfig` of Unsloth's GRPO
tutorial notebook, its values kept wherever TRL and a CPU take them (`RECIPE`; what had to change, and why, is in
`CHANGED` and in the JSON written), sampling every completion with gym-serve (`TRLRollouts` over the ingress).

    PYTHONPATH=scripts/source_tree:. VENV/bin/python \
        scripts/trainer_interfaces/unsloth_real.py URL TOKEN MODEL ROWS.jsonl OUT
"""

# ruff: noqa: I001  (the import order is Unsloth's requirement)
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import unsloth  # Unsloth first, as it asks: it patches transformers and TRL on import
from unsloth import FastLanguageModel, is_bfloat16_supported

import torch
from trl import GRPOConfig, GRPOTrainer

from gym_serve.client import GymClient
from gym_serve.trainers.trl import TRLRollouts, gym_reward

REWARD = "rewards/gym_reward/mean"
RECIPE: dict[str, Any] = {  # Unsloth's GRPO tutorial notebook (Llama 3.1 8B / Qwen), `GRPOConfig(...)`
    "use_vllm": True,
    "learning_rate": 5e-6,
    "adam_beta1": 0.9,
    "adam_beta2": 0.99,
    "weight_decay": 0.1,
    "warmup_ratio": 0.1,
    "lr_scheduler_type": "cosine",
    "optim": "adamw_8bit",
    "logging_steps": 1,
    "per_device_train_batch_size": 1,
    "gradient_accumulation_steps": 1,
    "num_generations": 6,
    "max_prompt_length": 256,
    "max_completion_length": 200,
    "max_steps": 250,
    "save_steps": 250,
    "max_grad_norm": 0.1,
    "report_to": "none",
}
CHANGED: dict[str, tuple[Any, str]] = {
    "use_vllm": (False, "gym-serve samples every completion (rollout_func); TRL's own vLLM is not used"),
    "per_device_train_batch_size": (6, "TRL needs the generation batch to hold whole groups of num_generations; "
                                       "Unsloth's GPU patch raises it to num_generations the same way"),
    "max_prompt_length": (None, "TRL >= 1.0's GRPOConfig has no such field (Unsloth's GPU patch adds it); "
                                "TRLRollouts(max_prompt_length=256) enforces it instead"),
    "max_steps": (2, "two steps prove the loop; the recipe's 250 are a real run"),
    "save_steps": (None, "no checkpoint written in a test"),
}  # fmt: skip


def main(url: str, token: str, model_path: str, rows_file: str, out: str) -> None:
    rows = [json.loads(line) for line in Path(rows_file).read_text().splitlines() if line.strip()]
    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=model_path, max_seq_length=1024, load_in_4bit=False
    )
    model = FastLanguageModel.get_peft_model(
        model, r=8, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], random_state=3407
    )
    changed = dict(CHANGED)
    settings = {k: v for k, v in RECIPE.items() if k not in ("max_prompt_length", "save_steps")}
    settings.update({k: v for k, (v, _) in CHANGED.items() if v is not None})
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    if "warmup_ratio" not in fields:  # transformers 5 folded it into warmup_steps (a float below 1 is a ratio)
        settings["warmup_steps"] = settings.pop("warmup_ratio")
        changed["warmup_ratio"] = (None, "transformers 5 has no warmup_ratio: warmup_steps=0.1 is the same ratio")
    for name in sorted(set(settings) - fields):
        raise SystemExit(f"the recipe's `{name}` is not a field of this TRL's GRPOConfig")
    rollouts = TRLRollouts(lambda: GymClient(url, token=token), rows, max_prompt_length=RECIPE["max_prompt_length"])
    args = GRPOConfig(
        output_dir=str(Path(out).parent / "unsloth-out"),
        bf16=is_bfloat16_supported(),
        fp16=False,
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
        beta=0.0,
        **settings,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[gym_reward],
        args=args,
        train_dataset=rollouts.dataset(),
        rollout_func=rollouts,
    )
    if trainer.args.optim != settings["optim"]:  # Unsloth's CPU backend swaps what a CPU cannot run
        changed["optim"] = (str(trainer.args.optim), "Unsloth's CPU backend: the recipe's 8-bit AdamW needs a GPU")
    lora = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    trainer.train()
    moved = [n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(p.detach(), lora[n])]
    batches = [
        {"step": b.step, "masks": [s.completion_mask for s in b.sequences], "rewards": [s.reward for s in b.sequences]}
        for b in rollouts.batches
    ]
    result = {
        "unsloth": unsloth.__version__,
        "device_type": unsloth.DEVICE_TYPE,
        "model_class": type(model).__name__,
        "settings": settings,
        "optim_used": str(trainer.args.optim),
        "changed": {k: [v, why] for k, (v, why) in changed.items()},
        "steps": trainer.state.global_step,
        "batches": batches,
        "lora_tensors_moved": len(moved),
        "logged_rewards": [log[REWARD] for log in trainer.state.log_history if REWARD in log],
    }
    Path(out).write_text(json.dumps(result))
    print(f"ok: Unsloth {unsloth.__version__} ({unsloth.DEVICE_TYPE}) trained {trainer.state.global_step} GRPO steps")


if __name__ == "__main__":
    main(*sys.argv[1:6])
