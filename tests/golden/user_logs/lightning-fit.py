# A user's Lightning script (nothing of hpc-launch in it but the torchvision import this machine needs),
# run as `python -m hpc_launch.joblayer lightning-fit.py 35` (lightning 2.6.6, CPU): lightning-fit.log.
import sys
from hpc_launch.train.tv_compat import import_torchvision

import_torchvision()
import lightning as L  # noqa: E402 (after the torchvision import this machine needs)
import torch  # noqa: E402 (after the torchvision import this machine needs)
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402 (after the torchvision import this machine needs)


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train/mse", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


g = torch.Generator().manual_seed(0)
data = TensorDataset(torch.randn(4096, 8, generator=g), torch.randn(4096, 1, generator=g))
trainer = L.Trainer(
    accelerator="cpu",
    devices=1,
    max_steps=int(sys.argv[1]),
    default_root_dir="lightning-root",
    log_every_n_steps=10,
    logger=False,
    enable_checkpointing=False,
    enable_progress_bar=True,
    enable_model_summary=False,
)
trainer.fit(Tiny(), DataLoader(data, batch_size=8))
