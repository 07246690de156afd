"""A process that ends at once (common/exit_file.py's end_process, as a follow-mode chief does) records its code and
leaves none of the Python files AutoGraph wrote for its functions in the temporary folder."""

from __future__ import annotations

import subprocess

from clusterkit import PYTHON, ROOT

CHIEF_LIKE = """
import sys
import tensorflow as tf
from common.exit_file import end_process

@tf.function
def clipped(x):
    while x > 10.0:  # control flow: AutoGraph converts it, writing a module to the temporary folder
        x = x - 10.0
    return x

assert float(clipped(tf.constant(25.0))) == 5.0
written = [m.__file__ for name, m in sys.modules.items() if name.startswith("__autograph_generated_file")]
print("\\n".join(written), flush=True)
end_process(3)
"""


def test_a_process_ended_at_once_records_its_code_and_removes_autographs_files(tmp_path):
    exit_file, script = tmp_path / "chief-0.exit", tmp_path / "chief_like.py"
    script.write_text(CHIEF_LIKE)  # a file: AutoGraph reads a function's source
    done = subprocess.run([PYTHON, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PSCLUSTER_EXIT_FILE": str(exit_file), "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)},
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 3, done.stderr[-3000:]
    assert exit_file.read_text() == "3\n"
    written = done.stdout.split()
    assert written and all(path.startswith(str(tmp_path)) for path in written), done.stdout  # it wrote some, here
    assert list(tmp_path.glob("__autograph_generated_file*")) == []  # and none is left
