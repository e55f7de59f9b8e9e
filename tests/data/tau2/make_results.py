"""Write results.json: tau2-bench simulation results in the documented shape
(sierra-research/tau2-bench, src/tau2/data_model/simulation.py: `Results` with `info`,
`tasks`, `simulations`; `SimulationRun` with `id`, `task_id`, `trial`, `duration`,
`termination_reason`, `agent_cost`, `user_cost`, `reward_info.reward`, `messages`;
src/tau2/data_model/message.py: `role`, `content`, `tool_calls` of `{id, name,
arguments, requestor}`, `turn_idx`). Made up, not a real run: three airline tasks x 4
trials covering each ending. Run: python3 tests/data/tau2/make_results.py"""

import json
from pathlib import Path

# task id -> (reward, termination_reason, the user's last message) per trial
PLAN = {
    "0": [
        (1.0, "user_stop", "Thanks. ###STOP###"),
        (1.0, "user_stop", "###STOP###"),
        (0.0, "timeout", "Are you still there?"),
        (1.0, "agent_stop", "Okay."),
    ],
    "3": [
        (0.0, "user_error", "I am an AI."),
        (0.0, "max_steps", "Please go on."),
        (1.0, "user_stop", "Got it, 4 bags. ###STOP###"),
        (0.0, "user_stop", "Never mind. ###OUT-OF-SCOPE###"),
    ],
    "13": [
        (1.0, "user_stop", "Please transfer me. ###TRANSFER###"),
        (1.0, "user_stop", "###TRANSFER###"),
        (0.0, "too_many_errors", "Hello?"),
        (1.0, "user_stop", "Bye. ###STOP###"),
    ],
}


def messages(task: str, trial: int, last_user: str, agent_stop: bool) -> list[dict]:
    call = {
        "id": f"call_{task}_{trial}",
        "name": "get_user_details",
        "arguments": {"user_id": "james_lee_6136"},
        "requestor": "assistant",
    }
    out = [
        {"role": "assistant", "content": "Hi! How can I help you today?", "turn_idx": 0},
        {"role": "user", "content": "I want to change my flight.", "turn_idx": 1},
        {"role": "assistant", "content": None, "tool_calls": [call], "turn_idx": 2},
        {
            "role": "tool",
            "id": call["id"],
            "content": '{"user_id": "james_lee_6136"}',
            "requestor": "assistant",
            "error": False,
            "turn_idx": 3,
        },
        {"role": "assistant", "content": "Your membership allows 4 bags.", "turn_idx": 4},
        {"role": "user", "content": last_user, "turn_idx": 5},
    ]
    if agent_stop:
        out.append({"role": "assistant", "content": "Goodbye. ###STOP###", "turn_idx": 6})
    return out


sims = []
for task, trials in PLAN.items():
    for trial, (reward, end, last) in enumerate(trials):
        sims.append(
            {
                "id": f"sim-{task}-{trial}",
                "task_id": task,
                "trial": trial,
                "seed": 300 + trial,
                "start_time": "2025-06-01T00:00:00",
                "end_time": "2025-06-01T00:01:00",
                "duration": 60.0,
                "termination_reason": end,
                "agent_cost": 0.02,
                "user_cost": 0.01,
                "reward_info": {"reward": reward, "reward_basis": ["DB", "COMMUNICATE"]},
                "messages": messages(task, trial, last, end == "agent_stop"),
            }
        )
doc = {
    "timestamp": "2025-06-01T00:00:00",
    "info": {"num_trials": 4, "max_steps": 200},
    "tasks": [],
    "simulations": sims,
}
Path(__file__).with_name("results.json").write_text(json.dumps(doc, indent=1) + "\n")
