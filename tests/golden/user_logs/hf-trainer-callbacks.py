"""The HF Trainer's own log callbacks (transformers 5.17) printing what Trainer.log passes them:
the per-step dict and the end-of-training dict with train_runtime / *_per_second (accelerate, which
Trainer itself needs, is not installed here: the callbacks are the code that prints the lines)."""

from hpc_launch.train.lm import import_transformers

t = import_transformers()
from transformers.trainer_callback import PrinterCallback, ProgressCallback, TrainerControl, TrainerState  # noqa: E402

state = TrainerState(max_steps=20, is_local_process_zero=True, is_world_process_zero=True)
control = TrainerControl()
bar = ProgressCallback()
bar.on_train_begin(None, state, control)
printer = PrinterCallback()
for step, loss in ((10, 2.1953), (20, 1.0371)):
    state.global_step = step
    logs = {"loss": loss, "grad_norm": 3.0517578125, "learning_rate": 5e-05 * (20 - step) / 20, "epoch": step / 10}
    bar.on_log(None, state, control, logs=dict(logs))
    printer.on_log(None, state, control, logs=dict(logs))
end = {
    "train_runtime": 4.2171,
    "train_samples_per_second": 37.942,
    "train_steps_per_second": 4.743,
    "total_flos": 1234.0,
    "train_loss": 1.6162109375,
    "epoch": 2.0,
}
bar.on_log(None, state, control, logs=dict(end))
printer.on_log(None, state, control, logs=dict(end))
bar.on_train_end(None, state, control)
