"""Trainer scenarios for tests/test_capture.py, each run in its own interpreter: `python capture_scenarios.py
hf OUT` or `... lightning train|eval OUT`. A tiny regressor raises PyTorch's CUDA OOM message in the chosen phase
(an injected failure); the trainer's callback and the hook must leave one record in OUT. `... cuda OUT` runs out
of a real GPU's memory under a 2 GiB memory fraction (no injection: PyTorch's own observer and message)."""

from __future__ import annotations

import sys

import torch

from oomdoctor.capture import Capture, hf_callback, lightning_callback

MESSAGE = ("CUDA out of memory. Tried to allocate 320.00 MiB. GPU 3 has a total capacity of 79.15 GiB of which "
           "15.31 MiB is free. Including non-PyTorch memory, this process has 79.12 GiB memory in use. Of the "
           "allocated memory 77.85 GiB is allocated by PyTorch, and 683.86 MiB is reserved by PyTorch but unallocated.")


class Oomer(torch.nn.Module):
    """Fails with the OOM in training or in evaluation, as told."""

    def __init__(self, fail_in: str) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)
        self.fail_in = fail_in

    def forward(self, x, labels=None):
        if (self.fail_in == "eval") != self.training:
            raise torch.OutOfMemoryError(MESSAGE)
        out = self.lin(x).squeeze(-1)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


def hf(out: str) -> None:
    import transformers

    data = [{"x": torch.randn(4), "labels": torch.randn(())} for _ in range(16)]
    args = transformers.TrainingArguments(
        output_dir=f"{out}/trainer", max_steps=6, eval_strategy="steps", eval_steps=4, save_strategy="no",
        per_device_train_batch_size=2, per_device_eval_batch_size=2, report_to=[], use_cpu=True,
        logging_strategy="no", disable_tqdm=True)
    hook = Capture(out)
    trainer = transformers.Trainer(model=Oomer("eval"), args=args, train_dataset=data, eval_dataset=data,
                                   callbacks=[hf_callback(hook)])
    try:
        with hook.guard():
            trainer.train()
    except torch.OutOfMemoryError:
        return
    raise SystemExit("the injected OOM did not happen")


def lightning(fail_in: str, out: str) -> None:
    import lightning as L

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.save_hyperparameters({"batch_size": 2})
            self.net = Oomer(fail_in)

        def training_step(self, batch, _):
            return self.net(batch[0], batch[1])["loss"]

        def validation_step(self, batch, _):
            return self.net(batch[0], batch[1])["loss"]

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(16, 4), torch.randn(16))
    loader = torch.utils.data.DataLoader(data, batch_size=2)
    hook = Capture(out)
    trainer = L.Trainer(max_steps=5, val_check_interval=3, num_sanity_val_steps=0, accelerator="cpu", logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[lightning_callback(hook)])
    try:
        trainer.fit(Module(), loader, loader)
    except torch.OutOfMemoryError:
        return
    raise SystemExit("the injected OOM did not happen")


def cuda(out: str) -> None:
    """Fragment a 2 GiB budget on a real GPU, then ask for 160 MiB; the memory history goes beside the record."""
    import oomdoctor.capture

    hook = oomdoctor.capture.install(out, history=True)
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(2 * 2**30 / total)
    # 2 MiB requests share 20 MiB segments (10 each); freeing every other one leaves 1000 MiB free in 2 MiB holes
    blocks = [torch.empty(2 * 2**20, dtype=torch.uint8, device="cuda") for _ in range(1000)]
    del blocks[::2]
    try:
        with hook.guard():
            torch.empty(160 * 2**20, dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        torch.cuda.memory._dump_snapshot(f"{out}/snapshot.pickle")
        return
    raise SystemExit("the 160 MiB request fitted")


if __name__ == "__main__":
    if sys.argv[1] == "cuda":
        cuda(sys.argv[2])
    elif sys.argv[1] == "hf":
        hf(sys.argv[2])
    else:
        lightning(sys.argv[2], sys.argv[3])
