"""The fused kernels' library builds at every x86 level the CI machine can run (x86-64-v2, v3 and native), with gcc and
clang, and the kernels' bit-exact, row-stability and lossless specs hold on each build; a build that fails is tried once
and remembered with the compiler's first error line."""
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from core.errors import SpecError
from core.kernels.cpu import build, cpu_layer, isa

ROOT = Path(__file__).resolve().parent.parent
OLDER = ("x86-64-v3", "x86-64-v2")  # what an AVX2-only CPU and a pre-AVX2 one build; both run on any x86-64-v3 CPU
SPECS = ["tests/test_cpu_kernels.py", "tests/test_gguf_isa.py", "tests/test_gguf_q8.py", "tests/test_lowrank_mm.py",
         "tests/test_runtime.py"]
x86_only = pytest.mark.skipif(not build.is_x86(), reason="the x86 levels build only on x86-64")
needs_v3 = pytest.mark.skipif(not build.is_x86() or "avx2" not in open("/proc/cpuinfo").read(),
                              reason="an x86-64-v3 build runs only on a CPU with AVX2")


@pytest.fixture(scope="module")
def built():
    """{level: the library gcc builds for it}, the levels compiled side by side (one per core)."""
    if not shutil.which("gcc"):
        pytest.skip("gcc is not installed here")
    with ThreadPoolExecutor(2) as pool:
        return dict(zip(("native",) + OLDER, pool.map(lambda lvl: build.library(lvl, "gcc"), ("native",) + OLDER)))


def fake_cc(tmp_path: Path, stderr: str) -> Path:
    """A compiler that answers --version, fails every build with `stderr`, and counts its builds in calls.txt."""
    cc, said = tmp_path / "fakecc", tmp_path / "stderr.txt"
    said.write_text(stderr + "\n")
    cc.write_text(f"#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'fakecc 1.0'; exit 0; fi\n"
                  f"echo x >> {tmp_path}/calls.txt\ncat {said} >&2\nexit 1\n")
    cc.chmod(0o755)
    return cc


def builds(tmp_path: Path) -> int:
    calls = tmp_path / "calls.txt"
    return len(calls.read_text().splitlines()) if calls.exists() else 0


@x86_only
def test_the_sources_build_at_x86_64_v2_v3_and_native_with_gcc(built):
    assert all(path.is_file() and path.stat().st_size > 0 for path in built.values())
    assert len(set(built.values())) == 3  # one library per level


needs_clang = pytest.mark.skipif(not shutil.which("clang"), reason="clang is not installed here (apt-get install clang)")


@x86_only
@needs_clang
def test_the_sources_build_with_clang_at_x86_64_v3(tmp_path):
    build.compile_so("clang", tmp_path / "clang.so", "x86-64-v3")
    assert (tmp_path / "clang.so").stat().st_size > 0


@needs_clang
def test_a_library_built_without_openmp_runs_one_thread_and_the_note_says_so(monkeypatch):
    """Debian's clang has no libomp: the build falls back to one thread, and the runtime note says why."""
    from tools.tiny import tiny_model
    from core.pipeline import runtime_note
    from core.runtime import fast
    monkeypatch.setenv("CC", "clang")
    isa.reload()
    try:
        assert cpu_layer.lib() is not None, cpu_layer.why_not()
        if not cpu_layer.one_thread():
            pytest.skip("this clang links OpenMP: its build shares out threads")
        note = runtime_note(fast.FastRunner(tiny_model(0)))
    finally:
        monkeypatch.delenv("CC")
        isa.reload()
    assert "kernels on one thread (built without OpenMP)" in note


@needs_v3
@pytest.mark.parametrize("lvl", OLDER)
def test_the_kernels_specs_hold_on_an_older_levels_build(lvl, built):
    """The bit-exact, row-stability and lossless specs, in a process whose library is the older level's build."""
    env = dict(os.environ, SPECLENS_MARCH=lvl, SPECLENS_CPU_ISA="avx2")  # avx2 variants: v2's build runs them too
    env.pop("PYTEST_ADDOPTS", None)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *SPECS], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout.splitlines()[-1]


def test_the_cap_builds_what_an_older_cpu_gets_and_the_level_implies_the_cap(monkeypatch):
    monkeypatch.delenv(build.MARCH, raising=False)
    monkeypatch.setenv(isa.ENV, "avx2")
    assert build.level() == ("x86-64-v3" if build.is_x86() else "native")
    monkeypatch.setenv(isa.ENV, "avx512")
    assert build.level() == "native"
    monkeypatch.delenv(isa.ENV)
    monkeypatch.setenv(build.MARCH, "x86-64-v2")
    assert isa.cap() == "none" and (build.level() == "x86-64-v2" or not build.is_x86())
    monkeypatch.setenv(build.MARCH, "x86-64-v3")
    assert isa.cap() == "avx2"


def test_an_unknown_level_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(build.MARCH, "pentium3")
    with pytest.raises(SpecError, match="SPECLENS_MARCH='pentium3': use one of native, x86-64-v4"):
        build.level()


def test_a_failed_build_names_the_compilers_first_error_and_is_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    cc = fake_cc(tmp_path, "In function 'pair_ph':\nq8_mm.c:61:5: error: inlining failed: target specific option")
    with pytest.raises(build.BuildError, match=r"-march=native failed: q8_mm\.c:61: inlining failed"):
        build.library("native", str(cc))
    tried = builds(tmp_path)
    assert tried == 2  # with OpenMP, then without
    with pytest.raises(build.BuildError, match="inlining failed"):
        build.library("native", str(cc))
    assert builds(tmp_path) == tried  # the record answers: the compiler is not run again
    assert json.loads(build.record("native", str(cc)).read_text())["compiler"] == str(cc)


def test_forgetting_a_failure_lets_the_next_process_build_again(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    cc = fake_cc(tmp_path, "x.c:1:1: error: boom")
    with pytest.raises(build.BuildError):
        build.library("native", str(cc))
    assert build.forget("native", str(cc)) and not build.record("native", str(cc)).exists()
    with pytest.raises(build.BuildError, match="boom"):
        build.library("native", str(cc))
    assert builds(tmp_path) == 4


def test_a_missing_compiler_is_named(monkeypatch):
    with pytest.raises(build.BuildError, match=r"no C compiler: CC='/nonexistent/cc' could not run"):
        build.library("native", "/nonexistent/cc")


def test_the_runtime_note_says_the_kernels_are_off_why_and_what_it_costs(tmp_path, monkeypatch):
    from tools.tiny import tiny_model
    from core.pipeline import runtime_note
    from core.runtime import fast
    monkeypatch.setenv("SPECLENS_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(fake_cc(tmp_path, "k.c:3:1: error: no AVX-512 here")))
    isa.reload()
    try:
        runner = fast.FastRunner(tiny_model(0))
        note = runtime_note(runner)
    finally:
        monkeypatch.delenv("CC")
        isa.reload()
    assert "fused kernels off: " in note and "k.c:3: no AVX-512 here" in note and "slower" in note


def test_doctor_names_the_level_the_reason_and_where_the_failure_is_remembered(tmp_path):
    env = dict(os.environ, SPECLENS_CACHE=str(tmp_path), CC=str(fake_cc(tmp_path, "a.c:9:9: error: nope")))
    out = subprocess.run([sys.executable, "-m", "core", "doctor", "--json"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    report = json.loads(out.stdout)
    assert report["kernels"]["loaded"] is False and "a.c:9: nope" in report["kernels"]["reason"]
    assert Path(report["kernels"]["record"]).is_file()
    assert set(report["products"].values()) == {"torch"}
    again = subprocess.run([sys.executable, "-m", "core", "doctor"], cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=120)
    assert "retry: python -m core doctor --rebuild" in again.stdout and builds(tmp_path) == 2


def test_a_slice_of_the_suite_passes_quickly_where_the_kernels_cannot_build(tmp_path):
    """The path a machine without a working compiler takes: a broken CC, the failure remembered after one try, the
    runtime and lossless specs on torch ops (their C-kernel halves skipped with the reason)."""
    cc = fake_cc(tmp_path, "k.c:1:1: error: no compiler")
    env = dict(os.environ, CC=str(cc))
    env.pop("PYTEST_ADDOPTS", None)
    try:
        out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_runtime.py",
                              "tests/test_lossless_tiny.py", "tests/test_cpu_kernels.py"], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=600)
    finally:
        build.forget(build.level(), str(cc))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "k.c:1: no compiler" in out.stdout  # the skips name the compiler's reason
    assert builds(tmp_path) == 2  # one failed build (with OpenMP, then without), remembered for every later test
