"""The user's T5-style HF Trainer fine-tune that the job layer's tests run (tests/e2e/test_hf_trainer_chain_e2e.py
on the testbed, tests/test_hf_trainer_adapter.py on this machine)."""

# A user's script as the HF examples write it: a model from its config, a Dataset, TrainingArguments,
# Trainer.train(). Nothing of hpc-launch's but the torchvision import this machine's wheel needs
# before transformers (hpc_launch/train/tv_compat.py); the step callback only counts, and gives each step a
# real step's length (the tiny model's own takes milliseconds).
SCRIPT = """\
import sys, time
from hpc_launch.train.tv_compat import import_torchvision

import_torchvision()
import torch
from transformers import T5Config, T5ForConditionalGeneration, Trainer, TrainerCallback, TrainingArguments

out, max_steps, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
torch.manual_seed(0)
config = T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
                  decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
model = T5ForConditionalGeneration(config)


class Reverse(torch.utils.data.Dataset):  # a toy seq2seq task: the target is the input reversed
    def __init__(self, n=512, length=12):
        self.x = torch.randint(2, 64, (n, length), generator=torch.Generator().manual_seed(1))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "attention_mask": torch.ones_like(self.x[i]), "labels": self.x[i].flip(0)}


class Steps(TrainerCallback):
    ran = 0

    def on_step_end(self, args, state, control, **kwargs):
        Steps.ran += 1
        time.sleep(pause)


args = TrainingArguments(output_dir=out, max_steps=max_steps, per_device_train_batch_size=8, learning_rate=3e-3,
                         logging_steps=20, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
                         seed=0, dataloader_num_workers=0)
trainer = Trainer(model=model, args=args, train_dataset=Reverse(), callbacks=[Steps()])
t0 = time.time()
trainer.train()
print(f"hf-script rank {trainer.args.process_index} of {trainer.args.world_size} global_step "
      f"{trainer.state.global_step} ran {Steps.ran} here in {time.time() - t0:.1f} s", flush=True)
"""
