"""tests/forked.py's ``Popen``: commands started together run together, each its own process, and give
back their exit status and output as ``subprocess.Popen``'s do."""

import sys

import forked

# each touches its file, then waits (up to 60 s) for all three: started one after another, none would finish
TOGETHER = """
import pathlib, sys, time
d, me = pathlib.Path(sys.argv[1]), sys.argv[2]
(d / me).touch()
deadline = time.monotonic() + 60
while len(list(d.iterdir())) < 3:
    if time.monotonic() > deadline:
        sys.exit(f"{me}: the others never started")
    time.sleep(0.01)
print("all three", me)
sys.exit(int(me))
"""


def test_commands_started_together_run_together_and_report_their_exit(tmp_path):
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [forked.Popen([sys.executable, "-c", TOGETHER, str(barrier), str(k)], cwd=tmp_path) for k in range(3)]
    assert len({p.pid for p in procs}) == 3
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 1, 2], outs
    assert [o for o, _ in outs] == [f"all three {k}\n" for k in range(3)]


def test_a_killed_command_reports_its_signal(tmp_path):
    p = forked.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"], cwd=tmp_path)
    assert p.poll() is None
    p.kill()
    assert p.wait(timeout=60) == -9
