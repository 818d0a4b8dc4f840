"""The host facts that a run's numbers depend on, read from the CPU's flags."""

import pytest

import acesql.host as host


@pytest.fixture
def fake_cpu(monkeypatch):
    """Set the CPU's /proc/cpuinfo text; the cached facts are read again before and after."""

    def use(flags: str) -> None:
        text = f"processor\t: 0\nmodel name\t: Intel Xeon\nflags\t\t: {flags}\n"
        monkeypatch.setattr(host, "_cpuinfo", lambda: text)
        host.host_tags.cache_clear()
        host.cpu_has_native_bf16.cache_clear()

    yield use
    host.host_tags.cache_clear()
    host.cpu_has_native_bf16.cache_clear()


@pytest.mark.parametrize(
    "flags,native_bf16,amx",
    [
        ("fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile", "true", "true"),
        ("fpu avx2 avx512f avx512_bf16", "true", "false"),  # the same name, other weights
        ("fpu avx2", "false", "false"),
    ],
)
def test_the_host_says_its_bf16_and_amx(fake_cpu, flags, native_bf16, amx):
    fake_cpu(flags)
    facts = host.host_facts()
    assert (facts["cpu"], facts["cpu_native_bf16"], facts["cpu_amx"]) == (
        "Intel Xeon",
        native_bf16,
        amx,
    )
    assert host.host_tags()["host.cpu_amx"] == amx
