"""Checking: deterministic graders and the LLM judge.

`graders` holds the deterministic checks by stable name (`GRADERS["<kind>"]`), `judge`
the LLM judge's prompts, parsing, judge files, human labels and trust.

May import: `evalkit.foundations`, `evalkit.numbers`.
"""
