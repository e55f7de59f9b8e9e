"""A skill folder's context cost (`evalkit tokens SKILL_DIR`, issue 32; what `waza tokens
count` measures): the tokens an agent carries for the skill at each stage of loading.

* ``catalogue``: the front matter's `name` and `description`, in context in every
  session (the agent picks a skill from them);
* ``activation``: the whole SKILL.md, read when the skill is used;
* ``on demand``: each other text file of the folder (references, scripts, assets),
  read only when the skill's instructions send the agent there.

Counted offline with `evalkit.foundations.tokens`: exactly with the model's tiktoken
encoding when it is in the local cache, else the UTF-8 byte bound (never below the true
count for a byte-level tokenizer), said as `exact` or `at most`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalkit.foundations._io import MAX_TEXT_BYTES, read_text_file
from evalkit.foundations.errors import InputError
from evalkit.foundations.tokens import TEXT_MARGIN, local_tiktoken, utf8_len
from evalkit.prompts.analyze import front_matter_block
from evalkit.suites.suite import SKILL_FILE


@dataclass(frozen=True)
class SkillTokens:
    """One skill's context cost: tokens per stage (`catalogue`, `activation`, and each
    on-demand file by its path in the folder), and how they were counted."""

    skill: str
    path: str
    method: str  # "tiktoken <encoding>" (exact) or "utf-8 byte bound" (at most)
    exact: bool
    catalogue: int
    activation: int
    on_demand: tuple[tuple[str, int], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "skill": self.skill,
            "path": self.path,
            "method": self.method,
            "exact": self.exact,
            "catalogue": self.catalogue,
            "activation": self.activation,
            "on_demand": dict(self.on_demand),
            "total": self.activation + sum(n for _, n in self.on_demand),
        }

    def render(self) -> str:
        how = "exact" if self.exact else "at most"
        lines = [
            f"{self.skill} ({self.path}): tokens, {how} ({self.method})",
            f"  catalogue (name + description, every session): {self.catalogue:,}",
            f"  activation (SKILL.md):                         {self.activation:,}",
        ]
        for rel, n in self.on_demand:
            lines.append(f"  on demand {rel}: {n:,}")
        lines.append(f"  total if everything is read: {self.activation + sum(n for _, n in self.on_demand):,}")
        return "\n".join(lines)


def skill_tokens(skill_dir: str | Path, model: str = "gpt-4o") -> SkillTokens:
    """The context cost of the skill in `skill_dir` (a folder holding SKILL.md) for
    `model`'s tokenizer (see the module notes). Files that are not UTF-8 text (images,
    binaries) are left out: an agent does not read them as text."""
    root = Path(skill_dir)
    skill_md = root / SKILL_FILE
    if not skill_md.is_file():
        raise InputError(f"not a skill folder: no {SKILL_FILE}", root)
    enc = local_tiktoken(model)

    def count(text: str) -> int:
        return len(enc.encode(text, disallowed_special=())) if enc is not None else utf8_len(text) + TEXT_MARGIN

    text = read_text_file(skill_md, limit=MAX_TEXT_BYTES, allow_empty=True, root=root)
    front = front_matter_block(text)[0]
    catalogue = "\n".join(str(front.get(k, "")) for k in ("name", "description") if front.get(k))
    on_demand = []
    for f in sorted(p for p in root.rglob("*") if p.is_file() and p != skill_md):
        try:
            body = read_text_file(f, limit=MAX_TEXT_BYTES, allow_empty=True, root=root)
        except (InputError, UnicodeDecodeError):
            continue  # not text an agent reads, or outside the folder through a link
        on_demand.append((f.relative_to(root).as_posix(), count(body)))
    return SkillTokens(
        skill=str(front.get("name") or root.name),
        path=str(root),
        method=f"tiktoken {enc.name}" if enc is not None else "utf-8 byte bound",
        exact=enc is not None,
        catalogue=count(catalogue) if catalogue else 0,
        activation=count(text),
        on_demand=tuple(on_demand),
    )
