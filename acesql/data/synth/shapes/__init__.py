"""Question shapes, registered by importing their modules (simple -> highly complex)."""

from acesql.data.synth.shapes import complex, highly_complex, moderate, simple  # noqa: F401
from acesql.data.synth.shapes.base import COMPLEXITIES, SHAPES, Ctx, Shape, Skip

__all__ = ["COMPLEXITIES", "SHAPES", "Ctx", "Shape", "Skip"]
