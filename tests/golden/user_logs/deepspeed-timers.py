"""A user's plain DeepSpeed loop, as in DeepSpeed's CIFAR-10 tutorial: timers every 5 steps."""

import deepspeed
import torch
import torch.nn as nn

deepspeed.init_distributed()
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
cfg = {
    "train_micro_batch_size_per_gpu": 8,
    "steps_per_print": 5,
    "wall_clock_breakdown": True,
    "log_level": "info",
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-2, "torch_adam": True}},
}
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
g = torch.Generator().manual_seed(0)
for step in range(20):
    x = torch.randn(8, 16, generator=g)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    loss = nn.functional.cross_entropy(engine(x), y)
    engine.backward(loss)
    engine.step()
    if engine.global_rank == 0 and (step + 1) % 5 == 0:
        print(f"step {step + 1} loss {loss.item():.4f}", flush=True)
