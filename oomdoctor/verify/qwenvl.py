"""Qwen2-VL and Qwen2.5-VL steps for `model: hf`: a batch as their processor makes it, and the model's own forward.

The processor cuts each image into 14 px patches, two frames deep (`pixel_values`: patches x channels x frames x
patch x patch, fp32), gives each image its (t, h, w) patch grid (`image_grid_thw`) and expands the image placeholder
into one token per 2 x 2 merged patches. The forward reads values in a few places: the vision tower's position ids,
its attention segments (`cu_seqlens`, split with `.tolist()`), 2.5's windows, the decoder's 3-D rotary positions
(`get_rope_index` walks the token types) and a check that the image tokens and features agree. Those are computed
here on the host with transformers' own functions and handed to the forward as it accepts them precomputed
(`image_cu_seqlens`, `image_position_ids`, ...; `position_ids`); the segment boundaries and the grid stay host
arrays, as a fake device cannot give values back. Every module, dtype and saved tensor is the model's own.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

import numpy as np
import torch

from oomdoctor.verify.architectures import DYNAMIC_IMAGE_SIDE
from oomdoctor.verify.params import HFParams


def image_side(config: Any, side: int | None) -> int:
    """The side a square image of `side` px (default 448) comes out of the processor at: rounded to a multiple of
    patch x merge (28 px), as its smart_resize rounds each side (its pixel bounds, 56-3584 px a side, not applied)."""
    vision = config.vision_config
    factor = vision.patch_size * vision.spatial_merge_size
    return max(factor, round((side or DYNAMIC_IMAGE_SIDE) / factor) * factor)


@contextlib.contextmanager
def _host() -> Iterator[None]:
    """Real host tensors for the index computations: outside the fake mode and off the simulated device."""
    from oomdoctor.verify.hfmodel import _outside_fake_mode

    with _outside_fake_mode(), torch.device("cpu"):
        yield


def inputs(model: Any, p: HFParams, device: torch.device) -> Callable[[int], dict[str, Any]]:
    """A batch of `batch` samples, each one image of the run's side (its tokens first, as in LLaVA's batch) and text
    to `seq_len` tokens in all; the loss covers the text only."""
    from transformers import vision_utils

    config = model.config
    vision = config.vision_config
    side = image_side(config, p.image_size)
    grid_side = side // vision.patch_size
    merge = vision.spatial_merge_size
    tokens = grid_side * grid_side // merge**2
    if tokens >= p.seq_len:
        raise ValueError(f"seq_len {p.seq_len} leaves no text after the image's {tokens} tokens ({side} px)")
    width = vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
    image_token = config.image_token_id
    vocab = min(config.text_config.vocab_size, image_token)
    rope_index = (model.get_base_model() if hasattr(model, "get_base_model") else model).model.get_rope_index

    def make(batch: int) -> dict[str, Any]:
        with _host():
            grid = torch.tensor([[1, grid_side, grid_side]] * batch)
            ids = torch.randint(0, vocab, (batch, p.seq_len))
            ids[:, :tokens] = image_token
            kinds = torch.zeros_like(ids, dtype=torch.int32)
            kinds[:, :tokens] = 1  # image
            positions, _ = rope_index(ids, mm_token_type_ids=kinds, image_grid_thw=grid)  # 3-D, text after image
            patch_positions = vision_utils.get_vision_position_ids(grid, merge)
            host = {"image_grid_thw": grid, "image_cu_seqlens": vision_utils.get_vision_cu_seqlens(grid)}
            window = None
            if config.model_type == "qwen2_5_vl":  # the window order is a host index, as transformers makes it
                window, host["image_cu_window_seqlens"] = vision_utils.get_vision_window_index(
                    grid, merge, vision.window_size, vision.patch_size)
            arrays: dict[str, Any] = {key: np.array(value.tolist()) for key, value in host.items()}
            if window is not None:
                arrays["image_window_index"] = window
        labels = _on(device, ids)
        labels[:, :tokens] = -100
        return {"input_ids": _on(device, ids), "labels": labels, "position_ids": _on(device, positions),
                "pixel_values": torch.randn(batch * grid_side * grid_side, width, device=device),
                "image_position_ids": _on(device, patch_positions), **arrays}
    return make


def _on(device: torch.device, host: torch.Tensor) -> torch.Tensor:
    """A host tensor's copy on `device` (on the simulated one, a fake tensor of its shape and dtype)."""
    return torch.empty(host.shape, dtype=host.dtype, device=device).copy_(host)


def forward(model: Any, batch: dict[str, Any]) -> Any:
    """The model's own forward on the batch, with transformers' check that the image tokens and features agree
    switched off (TRANSFORMERS_DISABLE_TORCH_CHECK; the batch is built so that they do, and the check reads values)."""
    with mock.patch.dict(os.environ, {"TRANSFORMERS_DISABLE_TORCH_CHECK": "1"}):
        return model(**batch, use_cache=False)
