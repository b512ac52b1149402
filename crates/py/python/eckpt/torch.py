"""torch.distributed.checkpoint (DCP) into eckpt: a ``StorageWriter`` and a ``StorageReader``.

Each rank's write items — tensor shards and pickled objects — become one eckpt epoch of that
rank: on its node's store, only the blocks changed since its previous epoch written, and in a
cluster erasure-coded across its group like any rank's image. ``dcp.load`` reads every item
wherever it lives now: from the store, from the node a rank was moved to, or decoded from its
group's survivors when its node is gone. A load reads through DCP's own planner, so it may
load into another sharding of the same state::

    import torch.distributed.checkpoint as dcp
    import eckpt.torch

    dcp.save(state_dict, storage_writer=eckpt.torch.StorageWriter())
    dcp.async_save(state_dict, storage_writer=eckpt.torch.StorageWriter())  # the same, in the background
    dcp.load(state_dict, storage_reader=eckpt.torch.StorageReader())        # the latest committed epoch

Under ``eckpt run`` the ranks are in cluster mode (``ECKPT_CLUSTER``); elsewhere they use the
store ``ECKPT_DIR`` names. Both take the rank from torch.distributed when it is initialised.

``checkpoint_id``: on save, a name recorded with the epoch (``"step-100"``); on load, an epoch
number or the name the latest committed epoch was saved with; without one, the latest
committed epoch. A save completes when its epoch is committed: in a cluster, when every rank's
part and the parity are durable.

``async_save`` stages through the writer itself: into copies of the tensors kept between saves,
of which a stage rewrites only what changed (``eckpt._torch_staging``), so training waits for
the copy of what changed instead of a copy of the whole state into fresh memory.
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
from collections import defaultdict
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner, SavePlan, SavePlanner, WriteItemType
from torch.distributed.checkpoint.staging import AsyncStager
from torch.distributed.checkpoint.storage import StorageReader as _StorageReader
from torch.distributed.checkpoint.storage import StorageWriter as _StorageWriter
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from eckpt._eckpt import Checkpointer, Error
from eckpt._torch_staging import Staging

__all__ = ["StorageWriter", "StorageReader", "checkpointer"]

# The item of the coordinator's epoch holding the checkpoint's DCP metadata and its name.
METADATA_ITEM = ".metadata"

# The rank whose epoch holds the metadata: DCP's coordinator, rank 0 of the job.
METADATA_RANK = 0

# The process's checkpointers, by rank and where they keep epochs.
_checkpointers: dict[tuple[int | None, str | None, str | None], Checkpointer] = {}

# The process's staging areas, one per checkpointer (kept referenced, so that its id stays its own).
_stagings: dict[int, tuple[Checkpointer, Staging]] = {}

# How long an async_save waits for the previous one to have written its staged state (seconds).
STAGE_TIMEOUT = 600.0


def _rank() -> int | None:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else None


def checkpointer() -> Checkpointer:
    """The process's checkpointer for DCP items, made on first use from the environment
    (``eckpt.Checkpointer()``) with torch.distributed's rank when it is initialised; one per
    rank and store, which writer and reader share: a rank's store is claimed by one
    checkpointer of the process."""
    rank = _rank()
    key = (rank, os.environ.get("ECKPT_DIR"), os.environ.get("ECKPT_CLUSTER"))
    if key not in _checkpointers:
        _checkpointers[key] = Checkpointer(rank=rank)
    return _checkpointers[key]


@dataclasses.dataclass(frozen=True)
class _Stored:
    """Where a write item is: rank ``rank``'s item ``item`` at ``epoch`` (None: the epoch
    holding the metadata), and what a tensor's bytes are (dtype, shape)."""

    rank: int
    epoch: int | None
    item: str
    dtype: str | None = None
    shape: tuple[int, ...] | None = None


def _staging(ck: Checkpointer) -> Staging:
    """The staging area of ``ck``'s saves: kept between them, whichever writer stages."""
    if id(ck) not in _stagings:
        _stagings[id(ck)] = (ck, Staging())
    return _stagings[id(ck)][1]


def _item_name(index: MetadataIndex) -> str:
    """The same name for the same shard in every save, so a save writes only what changed."""
    if index.offset is None:
        return index.fqn
    return f"{index.fqn}@{','.join(str(o) for o in index.offset)}"


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """A tensor's elements as bytes, in row-major order, on the host."""
    tensor = tensor.detach().to("cpu").contiguous().reshape(-1)
    return memoryview(tensor.view(torch.uint8).numpy())


def _tensor_of(data: bytes, where: _Stored) -> torch.Tensor:
    """The tensor a write item's bytes hold."""
    dtype = getattr(torch, where.dtype)
    if not data:
        return torch.empty(where.shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(where.shape)


def _completed(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class _Storage:
    """What writer and reader share: the checkpointer, made when first needed (so that a
    writer made before torch.distributed is initialised takes the rank), and the
    ``checkpoint_id`` of the checkpoint at hand."""

    def __init__(self, checkpointer: Checkpointer | None) -> None:
        self._checkpointer = checkpointer
        self._checkpoint_id: str | None = None

    @property
    def _ck(self) -> Checkpointer:
        if self._checkpointer is None:
            self._checkpointer = checkpointer()
        return self._checkpointer

    def _reset_id(self, checkpoint_id: str | os.PathLike | None) -> None:
        self._checkpoint_id = None if checkpoint_id is None else str(checkpoint_id)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike) -> bool:
        """Any name or epoch number: eckpt is chosen by passing its writer or reader."""
        return isinstance(checkpoint_id, (str, int))


class StorageWriter(_Storage, _StorageWriter, AsyncStager):
    """Saves a DCP checkpoint as one eckpt epoch per rank (see the module's documentation).
    ``checkpointer``: the eckpt checkpointer to save with (default: :func:`checkpointer`).

    It is its own stager for ``dcp.async_save``: the state dict's tensors are staged into copies
    kept between saves, of which a stage rewrites only what changed (``eckpt._torch_staging``);
    a stage waits at most ``stage_timeout`` seconds for the previous save to have written its
    staged state."""

    # The copy is done when stage() returns: nothing to wait for after it.
    _synchronize_after_execute = False

    def __init__(self, checkpointer: Checkpointer | None = None, *, stage_timeout: float = STAGE_TIMEOUT) -> None:
        _Storage.__init__(self, checkpointer)
        self._is_coordinator = False
        self._pending: list[tuple[str, Any]] = []
        self._stage_timeout = stage_timeout
        # The stage this writer's save writes, if it was staged: what it releases when done.
        self._staged: tuple[Staging, int] | None = None

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        staging = _staging(self._ck)
        staged, stage = staging.stage(state_dict, self._stage_timeout)
        self._staged = (staging, stage)
        return staged

    def synchronize_staging(self) -> None:
        pass

    def __getstate__(self) -> dict[str, Any]:
        # DCP's process executor pickles the writer into another process, which could neither
        # see the copies staged here nor release them for the next save.
        raise Error(
            "eckpt.torch.StorageWriter saves from the training process, where it stages: use "
            "async_save's thread executor (the default), not AsyncCheckpointerType.PROCESS"
        )

    def close(self) -> None:
        pass

    def _release_staged(self) -> None:
        """The staged state is in the store (or its save failed): the next stage may reuse it."""
        if self._staged is not None:
            staging, stage = self._staged
            staging.release(stage)

    def reset(self, checkpoint_id: str | os.PathLike | None = None) -> None:
        self._reset_id(checkpoint_id)
        self._pending = []

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self._is_coordinator = is_coordinator
        if is_coordinator and self._ck.rank != METADATA_RANK:
            self._release_staged()
            raise Error(f"eckpt.torch: the checkpoint's coordinator is eckpt rank {self._ck.rank}, not rank 0")

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        return plans

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future:
        try:
            return self._write_data(plan, planner)
        except BaseException:
            self._release_staged()
            raise
        finally:
            if not self._is_coordinator:
                self._release_staged()

    def _write_data(self, plan: SavePlan, planner: SavePlanner) -> Future:
        rank = self._ck.rank
        items: list[tuple[str, Any]] = []
        stored: list[tuple[Any, int, _Stored]] = []
        for write in plan.items:
            name = _item_name(write.index)
            data = planner.resolve_data(write)
            if write.type == WriteItemType.BYTE_IO:
                payload: Any = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data)
                where = _Stored(rank, None, name)
            else:
                payload = _tensor_bytes(data)
                where = _Stored(rank, None, name, str(data.dtype).removeprefix("torch."), tuple(data.shape))
            items.append((name, payload))
            stored.append((write.index, len(payload), where))
        if self._is_coordinator:
            # Saved in finish(), with the metadata, so that the epoch commits only with it.
            self._pending = items
            epoch = None
        else:
            epoch = self._ck.save_items(items)
        return _completed(
            [WriteResult(index=index, size_in_bytes=size, storage_data=dataclasses.replace(where, epoch=epoch)) for index, size, where in stored]
        )

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        metadata.storage_data = {result.index: result.storage_data for rank_results in results for result in rank_results}
        record = pickle.dumps({"metadata": metadata, "checkpoint_id": self._checkpoint_id})
        # The metadata first: an export streams a rank's items in order, up to the last one a
        # reader wants, and every rank of a load reads the metadata.
        try:
            self._ck.save_items([(METADATA_ITEM, record), *self._pending])
        finally:
            self._pending = []
            self._release_staged()
        # Done means committed: in a cluster, once every rank's part and the parity are durable.
        self._ck.wait()


class StorageReader(_Storage, _StorageReader):
    """Loads a DCP checkpoint that :class:`StorageWriter` saved (see the module's
    documentation). ``checkpointer``: the eckpt checkpointer to read with (default:
    :func:`checkpointer`)."""

    def __init__(self, checkpointer: Checkpointer | None = None) -> None:
        _Storage.__init__(self, checkpointer)
        self._epoch: int | None = None
        self._storage: dict[MetadataIndex, _Stored] = {}

    def reset(self, checkpoint_id: str | os.PathLike | None = None) -> None:
        self._reset_id(checkpoint_id)
        self._epoch = None
        self._storage = {}

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        wanted = self._checkpoint_id
        number = int(wanted) if wanted is not None and wanted.isdigit() else None
        epoch, items = self._ck.read_items(METADATA_RANK, number, [METADATA_ITEM])
        if METADATA_ITEM not in items:
            raise Error(f"eckpt.torch: epoch {epoch} holds no torch.distributed.checkpoint (it was not saved through eckpt.torch)")
        record = pickle.loads(items[METADATA_ITEM])
        if wanted is not None and number is None and record["checkpoint_id"] != wanted:
            saved_as = record["checkpoint_id"]
            raise Error(
                f"eckpt.torch: no checkpoint named {wanted!r}: the latest committed epoch, {epoch}, "
                f"was saved as {saved_as!r}; name an older one by its epoch number"
            )
        self._epoch = epoch
        return record["metadata"]

    def set_up_storage_reader(self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self._storage = metadata.storage_data

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        by_source: dict[tuple[int, int], list] = defaultdict(list)
        for read in plan.items:
            where = self._storage[read.storage_index]
            epoch = self._epoch if where.epoch is None else where.epoch
            by_source[(where.rank, epoch)].append((read, where))
        for (rank, epoch), reads in by_source.items():
            names = sorted({where.item for _, where in reads})
            _, items = self._ck.read_items(rank, epoch, names)
            for read, where in reads:
                if where.item not in items:
                    raise Error(f"eckpt.torch: rank {rank}'s epoch {epoch} lacks item {where.item!r}")
                data = items[where.item]
                if read.type == LoadItemType.BYTE_IO:
                    planner.load_bytes(read, io.BytesIO(data))
                    continue
                stored = _tensor_of(data, where)
                for dim, (offset, length) in enumerate(zip(read.storage_offsets, read.lengths)):
                    stored = stored.narrow(dim, offset, length)
                target = planner.resolve_tensor(read).detach()
                if target.size() != stored.size():
                    raise Error(f"eckpt.torch: {read.storage_index.fqn}: stored {tuple(stored.size())}, loading into {tuple(target.size())}")
                target.copy_(stored)
                planner.commit_tensor(read, target)
        return _completed(None)
