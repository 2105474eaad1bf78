"""The replay server's perturbations: a shifted wall clock and an environment that reads otherwise.

Each runs in a subprocess: they change the process they run in for good.
"""

from __future__ import annotations

import os
import subprocess
import sys

CLOCK = """
import datetime as dt, time
real_now, real_time = dt.datetime.now(), time.time()
from durasim.checkers import CLOCK_SHIFT
from durasim.checkers._fresh_child import shift_wall_clock
shift_wall_clock()
from datetime import datetime
ahead = datetime.now() - real_now
assert CLOCK_SHIFT <= ahead < CLOCK_SHIFT + dt.timedelta(seconds=30), ahead
assert datetime.now().year > real_now.year
assert datetime.utcnow() > real_now
assert 0 < time.time() - real_time - CLOCK_SHIFT.total_seconds() < 30
assert time.localtime().tm_year > real_now.year
assert time.strftime("%Y") == str(time.localtime().tm_year)
made = datetime(2020, 1, 2)
real_class = type(real_now)
assert type(made) is real_class  # values are real datetimes (serializers check the type)
assert isinstance(made, datetime) and issubclass(real_class, datetime)
assert datetime.fromisoformat("2020-01-02T00:00:00") == made
assert dt.datetime.now() - real_now >= CLOCK_SHIFT
print("ok")
"""

ENVIRON = """
import os
os.environ["SET_HERE"] = "v"
from durasim.checkers._fresh_child import ENV_MARK, perturb_environment
perturb_environment()
assert os.environ["SET_HERE"] == "v:" + ENV_MARK
assert os.environ.get("UNSET_HERE", "default") == ENV_MARK + ":UNSET_HERE"
assert os.getenv("UNSET_HERE") == ENV_MARK + ":UNSET_HERE"
assert os.environ.get("PYTHONSOMETHING_UNSET") is None
assert os.environ["DURASIM_FRESH_PROCESS"] == "1"
assert dict(os.environ)["SET_HERE"] == "v:" + ENV_MARK
assert "UNSET_HERE" not in list(os.environ)
print("ok")
"""


def _run(script: str) -> str:
    env = {**os.environ, "DURASIM_FRESH_PROCESS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_wall_clock_is_shifted_and_datetimes_stay_real_datetimes() -> None:
    assert _run(CLOCK).strip() == "ok"


def test_every_variable_reads_differently_but_the_interpreters_and_ours() -> None:
    assert _run(ENVIRON).strip() == "ok"
