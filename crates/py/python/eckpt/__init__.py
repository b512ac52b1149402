"""eckpt: incremental checkpoint/restart of numpy arrays and files, in place.

A rank protects its state, calls ``restart()`` once at start (a no-op on a fresh start) and
``checkpoint()`` now and then; after a crash the rerun process resumes from the last epoch::

    import numpy as np, eckpt
    ck = eckpt.Checkpointer(dir="/tmp/ck", rank=0)   # default: ECKPT_DIR / ECKPT_RANK
    grid = np.zeros((1000, 1000)); step = np.zeros(1, dtype=np.int64)
    ck.protect("grid", grid); ck.protect("step", step)
    ck.protect_file("log.txt", eckpt.APPEND)
    ck.restart()            # fills grid and step in place; returns the epoch or None
    while step[0] < 100:
        ...                 # compute, append to log.txt
        step[0] += 1
        ck.checkpoint()     # saves only the blocks written since the previous epoch

Arrays are protected in place: any dtype except object, C-contiguous and writeable. The
checkpointer keeps a reference to each, so they live as long as it does; ``checkpoint()`` and
``restart()`` refuse an array moved since ``protect`` (``resize(refcheck=False)``), and
``restart()`` one whose dtype or shape is not the checkpoint's.

Files: ``APPEND`` files are cut back to their checkpointed length at restart (no duplicated
lines), ``SNAPSHOT`` files are saved and restored, ``INPUT`` files must be unchanged (restart
raises ``eckpt.Error`` and changes nothing otherwise). In a directory given to
``protect_dir``, files created after the checkpoint are moved into ``.eckpt-rollback/``.

Errors from the checkpointer raise ``eckpt.Error`` (a ``RuntimeError``; ``code`` is the C
API's ``ECKPT_E*`` code); bad arguments raise ``eckpt.InvalidArgument``, which is both an
``eckpt.Error`` and a ``ValueError``, or ``TypeError`` for a wrong type. A bug inside eckpt
raises ``eckpt.Error`` too (code ``ECKPT_EINTERNAL``). Several threads may share a
``Checkpointer``: their calls take turns.

``eckpt.torch`` (imported on its own, it needs torch) is a storage backend of
torch.distributed.checkpoint: ``dcp.save(state_dict, storage_writer=eckpt.torch.StorageWriter())``.
"""

from eckpt._eckpt import APPEND, INPUT, SNAPSHOT, Checkpointer, Error, InvalidArgument

__all__ = ["APPEND", "INPUT", "SNAPSHOT", "Checkpointer", "Error", "InvalidArgument"]
