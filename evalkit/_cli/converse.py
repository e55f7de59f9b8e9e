"""CLI: `evalkit converse` (thin over `evalkit.running.play`): a person plays a case's user from the terminal."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from evalkit._cli.options import echo_text
from evalkit.foundations.layout import HUMAN_PLAYED_FILE

if TYPE_CHECKING:  # for annotations only: the library loads with the command
    from evalkit.foundations.records import Case

ANSWERS = {"passed": True, "pass": True, "p": True, "yes": True, "y": True}
ANSWERS |= {"failed": False, "fail": False, "f": False, "no": False, "n": False}


def _briefing(case: Case, arm: str, model: str) -> list[str]:
    """What the person reads before playing: the user they play, how to end, the checks."""
    from evalkit.suites.suite_conversation import STOP_MARKERS, USER_KEYS  # lazy: as every command module

    user = case.input.get("user") if isinstance(case.input, dict) else None
    lines = [f"case {case.id}, arm {arm} (model {model}). You play the user:"]
    lines += [f"  {k}: {user[k]}" for k in USER_KEYS if isinstance(user, dict) and k in user]
    lines.append(f"End with {', '.join(STOP_MARKERS)} (text before the marker is your last turn); one line a turn.")
    checks = ", ".join(c.kind for c in case.checks) or "none"
    lines.append(f"The case's checks: {checks}{'; judged: ' + (case.rubric or '') if case.judged else ''}")
    return lines


def _show(turns: Any, shown: int) -> int:
    """Print the turns after the first `shown`; return how many are shown now."""
    for t in list(turns)[shown:]:
        echo_text(f"{'user' if t['role'] == 'user' else 'agent'}> {t['content']}")
    return len(turns)


def _play(session: Any, stdin: Any) -> Any:
    """The person's turns, a line of stdin each (an empty line sends nothing), until an
    ending or the end of input (the play abandoned); the final `PlayState`."""
    state, shown = session.state, 0
    while not state.ended:
        shown = _show(state.conversation, shown)
        line = stdin.readline()
        if not line:
            return session.abandon()
        if line.strip():
            state = session.say(line.rstrip("\n"))
    _show(state.conversation, shown)
    return state


def _ask_outcome(stdin: Any) -> bool | None:
    """The outcome the person saw, read from stdin (None at the end of input)."""
    while True:
        echo_text("Did the agent pass this case, as its checks ask? [passed/failed]", err=True)
        line = stdin.readline()
        if not line:
            return None
        answer = ANSWERS.get(line.strip().lower())
        if answer is not None:
            return answer


@click.command("converse")
@click.argument("suite", type=click.Path(exists=True, path_type=Path))
@click.option("--case", "case_id", required=True, metavar="ID", help="The case whose user you play.")
@click.option("--arm", required=True, metavar="NAME", help="The arm whose unit answers you.")
@click.option("--player", required=True, metavar="NAME", help="Who plays (recorded on the saved conversation).")
@click.option(
    "--outcome",
    type=click.Choice(["passed", "failed"]),
    default=None,
    help="The outcome you saw (default: asked on stdin after the ending).",
)
@click.option("--note", default=None, help="A note kept with the saved conversation.")
@click.option("--base-url", envvar="EVALKIT_BASE_URL", default=None, help="The unit's endpoint; overrides the config.")
@click.option("--cost-cap", type=float, default=None, help="The play's cap in USD (default: the suite's cost_cap_usd).")
@click.option("--allow-private-data", is_flag=True, help="Play even though the privacy scan found personal data.")
def converse_cmd(
    suite: Path,
    case_id: str,
    arm: str,
    player: str,
    outcome: str | None,
    note: str | None,
    base_url: str | None,
    cost_cap: float | None,
    allow_private_data: bool,
) -> None:
    """Play the user of SUITE's case against an arm, one line of stdin a turn: the unit
    answers each through the metered path a run's samples take (under the cap). The
    conversation, and the outcome you saw, go to SUITE/simulator/human-played.jsonl;
    `evalkit grade` compares such conversations with a run's simulated ones."""
    from evalkit.running.play import PlaySession  # lazy: the library loads only when this command runs
    from evalkit.suites import reader

    s = reader.load_suite(suite)
    session = PlaySession(
        s, case_id, arm, player, base_url=base_url, cost_cap_usd=cost_cap, allow_private_data=allow_private_data
    )
    for line in _briefing(session.case, arm, session.config.generator.model):
        echo_text(line, err=True)
    stdin = sys.stdin
    session.start()
    try:
        state = _play(session, stdin)
    except KeyboardInterrupt:
        state = session.abandon()
    if not state.saveable:
        echo_text(f"the conversation {state.error}; nothing saved (spent ${state.cost_usd:.6f})", err=True)
        sys.exit(1)
    echo_text(
        f"ended: {state.termination} after {sum(t['role'] == 'assistant' for t in state.conversation)} "
        f"agent turn(s); spent ${state.cost_usd:.6f}"
    )
    seen = ANSWERS[outcome] if outcome is not None else _ask_outcome(stdin)
    play = session.save(seen, note)
    checks = {True: "passed", False: "failed", None: "none to run"}[play.checks_passed]
    said = {True: "passed", False: "failed", None: "not recorded"}[seen]
    echo_text(f"you saw: {said}; the case's checks on the transcript: {checks}")
    echo_text(f"saved play {play.play} to {Path(s.path) / HUMAN_PLAYED_FILE}")


COMMANDS = [converse_cmd]
