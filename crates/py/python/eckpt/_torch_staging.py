"""The staging area of ``dcp.async_save`` into eckpt: copies of the state dict's tensors kept
between saves, brought up to date by copying only what was written since the previous save.

DCP's own stager copies the whole state dict at every ``async_save``, and training waits for
that copy. Here each tensor keeps a copy of its own, mirrored by ``eckpt._eckpt.Mirror``. For
a CPU tensor the kernel tracks the pages written to it (userfaultfd write-protect; the
unaligned ends of its memory, and memory the kernel cannot track, are compared by hash), so a
stage copies the pages the training step wrote and nothing else. A GPU tensor's copy is
page-locked host memory, and a stage fingerprints the tensor's 64 KiB blocks on the GPU and
copies over the bus only the blocks whose fingerprint changed. Tensors that are not contiguous
are copied whole into a copy kept from the previous save. Values that are not tensors are
deep-copied.

Tracking a CPU tensor is not free: the first write to a page after a stage takes a fault the
kernel resolves (about 0.7 µs per 4 KiB page measured on an AMD EPYC, against 0.21 µs to copy
the page), paid by the training step. So a CPU tensor of which more than a quarter changed
between two saves — a weight every optimizer step rewrites — is copied whole from then on, and
tracked again a few saves later to see whether it went quiet (a frozen layer, an embedding row
or two). A GPU tensor stays tracked: its fingerprints cost the training step nothing, and a
stage reads the GPU's memory at the GPU's bandwidth, far above the bus's.

A staged state dict is read by the save running in the background; the next stage waits
until that save has written it (``release``), up to a deadline.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

import torch
from torch.distributed.tensor import DTensor

from eckpt._eckpt import Error, InvalidArgument, Mirror

# The share of a tracked tensor that, written between two saves, makes tracking it cost more
# than copying it whole (see the module's documentation).
TRACKED_CHANGE_LIMIT = 0.25

# How many saves a tensor demoted to whole copies waits before it is tracked again.
RETRACK_AFTER_SAVES = 8


class _Kept:
    """A tensor's copy kept between saves, and the mirror pair keeping it (None: copied whole);
    shared by every path of the state dict that holds the same tensor (tied weights)."""

    def __init__(self, source: torch.Tensor, copy: torch.Tensor) -> None:
        self.identity = _Kept.identity_of(source)
        self.copy = copy
        self.bytes = source.numel() * source.element_size()
        self.trackable = source.device.type in ("cpu", "cuda") and source.is_contiguous() and self.bytes > 0
        # A GPU tensor's tracking costs the training step nothing: it is never demoted.
        self.on_gpu = source.device.type == "cuda"
        self.pair: int | None = None
        # The stage from which a tensor copied whole is tried with tracking again, and the
        # stage at which tracking it began (whose refresh copies all of it).
        self.track_from = 0
        self.tracked_at = 0
        self.paths = 0
        self.staged = -1

    @staticmethod
    def identity_of(tensor: torch.Tensor) -> tuple:
        """What makes two tensors the same one, where it is."""
        return (tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tensor.stride(), tensor.device)


class Staging:
    """One process's staging area (see the module's documentation)."""

    def __init__(self) -> None:
        self._mirror = Mirror()
        self._by_path: dict[tuple, _Kept] = {}
        self._by_identity: dict[tuple, _Kept] = {}
        self._free = threading.Event()
        self._free.set()
        # Taking the staged state (free → busy, the stage's number) and a release of it are
        # one step each, so that a late release of an older stage never frees a newer one.
        self._turn = threading.Lock()
        self._stages = 0
        self._whole_bytes = 0
        #: What the last stage did: bytes ``copied`` by the mirror out of ``mirrored``
        #: (``kernel_tracked`` of them tracked by the kernel), bytes ``copied_whole``, and its
        #: ``seconds``.
        self.last: dict[str, int] = {}

    def stage(self, state_dict: dict[str, Any], timeout: float) -> tuple[dict[str, Any], int]:
        """The state dict with every tensor replaced by its kept copy, brought up to date, and
        the stage's number, which ``release`` takes."""
        if not self._free.wait(timeout):
            raise Error(
                f"eckpt.torch: the previous async_save has not written its staged state after {timeout:g} s; "
                "wait for its future before the next save"
            )
        with self._turn:
            self._free.clear()
            self._stages += 1
        started = time.perf_counter()
        try:
            self._whole_bytes = 0
            seen: set[tuple] = set()
            staged = self._staged(state_dict, (), seen)
            for path in [path for path in self._by_path if path not in seen]:
                self._forget(path)
            refreshed = self._mirror.refresh()
            self._demote_busy(refreshed.pop("copied_by_pair"))
            if any(kept.copy.is_pinned() for kept in self._by_identity.values()):
                torch.cuda.synchronize()
            seconds = time.perf_counter() - started
            self.last = {**refreshed, "copied_whole": self._whole_bytes, "seconds": seconds}
            return staged, self._stages
        except BaseException:
            self._free.set()
            raise

    def release(self, stage: int) -> None:
        """Stage ``stage``'s state dict is written: the next stage may overwrite it (a stage
        already released, or overwritten since, is not released again)."""
        with self._turn:
            if stage == self._stages:
                self._free.set()

    def _staged(self, value: Any, path: tuple, seen: set[tuple]) -> Any:
        if isinstance(value, dict):
            return {key: self._staged(item, (*path, key), seen) for key, item in value.items()}
        if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
            return type(value)(self._staged(item, (*path, i), seen) for i, item in enumerate(value))
        if isinstance(value, DTensor):
            local = self._tensor(value.to_local(), path, seen)
            return DTensor(local, value._spec, requires_grad=False)
        if type(value) in (torch.Tensor, torch.nn.Parameter):
            return self._tensor(value, path, seen)
        return copy.deepcopy(value)

    def _tensor(self, tensor: torch.Tensor, path: tuple, seen: set[tuple]) -> torch.Tensor:
        seen.add(path)
        tensor = tensor.detach()
        identity = _Kept.identity_of(tensor)
        kept = self._by_path.get(path)
        if kept is not None and kept.identity != identity:
            self._forget(path)
            kept = None
        if kept is None:
            kept = self._by_identity.get(identity) or self._keep(tensor)
            kept.paths += 1
            self._by_path[path] = kept
        if kept.staged != self._stages:
            kept.staged = self._stages
            if kept.pair is None and kept.trackable and self._stages >= kept.track_from:
                self._track(kept, tensor)
            if kept.pair is None:
                kept.copy.copy_(tensor, non_blocking=kept.copy.is_pinned())
                self._whole_bytes += kept.bytes
        return kept.copy

    def _keep(self, tensor: torch.Tensor) -> _Kept:
        copy = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=tensor.device.type == "cuda")
        kept = _Kept(tensor, copy)
        self._by_identity[kept.identity] = kept
        return kept

    def _track(self, kept: _Kept, tensor: torch.Tensor) -> None:
        """Mirrors ``tensor`` into its copy (the next refresh copies all of it)."""
        try:
            kept.pair = self._mirror.add(tensor, kept.copy)
            kept.tracked_at = self._stages
        except InvalidArgument:
            # Memory another tracked tensor covers in part (a view of it): copied whole.
            kept.trackable = False

    def _demote_busy(self, copied_by_pair: dict[int, int]) -> None:
        """Copies whole from now on the tracked tensors of which more than the limit changed
        (a first refresh, which copies all, says nothing about changes)."""
        for kept in self._by_identity.values():
            if kept.pair is None or kept.on_gpu or kept.pair not in copied_by_pair or kept.tracked_at == self._stages:
                continue
            if copied_by_pair[kept.pair] > TRACKED_CHANGE_LIMIT * kept.bytes:
                self._mirror.remove(kept.pair)
                kept.pair = None
                kept.track_from = self._stages + RETRACK_AFTER_SAVES

    def _forget(self, path: tuple) -> None:
        kept = self._by_path.pop(path)
        kept.paths -= 1
        if kept.paths == 0:
            del self._by_identity[kept.identity]
            if kept.pair is not None:
                self._mirror.remove(kept.pair)
