"""acesql: train text-to-SQL models with ACE-SQL (joint dual-role GRPO)."""

__version__ = "0.1.0"
