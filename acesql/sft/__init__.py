"""Supervised cold start: SFT targets for both roles, and the mixed SFT trainer."""
