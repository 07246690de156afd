"""Whether each ps writes its own rows of a checkpoint: `training.output_dir_shared` declares that every ps reaches
output_dir at the same path, and the chief proves it at start by having each ps read a file it has just written."""

from __future__ import annotations

import secrets
from pathlib import Path

import tensorflow as tf

from common.errors import Problem, UserError

CHECK_NAME = ".shared-output-check"
FIELD = "training.output_dir_shared"


def rows_on_ps(config, options, directory: Path, log) -> bool:
    """True when every ps of `config` reads what the chief writes under `directory` at the same path (said once);
    False, said once, when output_dir is not declared shared. Declared but not seen by a ps: a UserError naming it."""
    if not options.output_dir_shared:
        log.info("checkpoints and deltas are written through the chief, every byte of every ps (%s is false: say true "
                 "when every ps reaches %s at the same path)", FIELD, options.output_dir)
        return False
    directory.mkdir(parents=True, exist_ok=True)
    path, token = directory.resolve() / CHECK_NAME, secrets.token_hex(16)
    path.write_text(token)
    try:
        for task in config.tasks(("ps",)):
            seen = _read_on(f"/job:ps/replica:0/task:{task.index}/device:CPU:0", str(path))
            if seen != token:
                raise UserError(Problem(FIELD, True, f"ps:{task.index} ({task.address}) "
                                        f"{'reads another file at' if seen else 'cannot read'} {path}, which the "
                                        f"chief wrote", "put output_dir on storage every ps mounts at the same path, "
                                        "or set it false (the chief then writes every byte)"))
    finally:
        path.unlink(missing_ok=True)
    log.info("each ps writes its own tables' rows of every checkpoint and delta into %s (%s)", directory, FIELD)
    return True


def _read_on(device: str, path: str) -> str | None:
    """The text of `path` as the task of `device` reads it on its own host, or None where it has no such file."""
    try:
        with tf.device(device):
            return tf.io.read_file(path).numpy().decode(errors="replace")
    except (tf.errors.NotFoundError, tf.errors.PermissionDeniedError, tf.errors.FailedPreconditionError):
        return None
