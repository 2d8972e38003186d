"""The ``user_input`` node's spec: ports by interaction and timeout action, what it declares,
and how a parked activation is kept in the run's state."""

from __future__ import annotations

from agentflow.core.config_validation import validate_config
from agentflow.core.definitions import StructuredConfig
from agentflow.core.graph import frontier
from agentflow.core.graph.frontier import Activation
from agentflow.core.graph.human_nodes import UserInputNode
from agentflow.core.inbox import AWAITING_EVENT
from agentflow.core.planner import park_for_answer
from agentflow.core.statuses import RunStatus

FORM = {"type": "object", "properties": {"amount": {"type": "integer"}}}


def test_ports_follow_the_interaction_and_the_timeout_action() -> None:
    assert UserInputNode(id="a", message="ok?").output_ports() == ("approved", "rejected", "error")
    review = UserInputNode(id="r", message="ok?", interaction="review", proposed=1, timeout_action="continue")
    assert review.output_ports() == ("approved", "rejected", "timeout", "error")
    form = UserInputNode(id="f", message="how much?", interaction="input", form=FORM)
    assert form.output_ports() == ("result", "error")
    assert form.port_of("answered") == "result" and form.port_of("timeout") == "timeout"
    assert review.port_of("answered") == "approved" and review.port_of("rejected") == "rejected"


def test_what_it_declares_and_what_the_answer_is_checked_against() -> None:
    form = UserInputNode(id="f", message="how much?", interaction="input", form=FORM)
    assert form.port_schema("result")["properties"]["response"] == FORM
    assert form.request_spec() == {"form": FORM}
    pick = UserInputNode(
        id="s",
        message="which?",
        interaction="selection",
        options=[{"value": 1}, {"value": "b", "label": "B"}],
    )  # type: ignore[list-item]
    assert pick.request_spec() == {"options": [{"value": 1}, {"value": "b", "label": "B"}]}
    assert UserInputNode(id="a", message="ok?").request_spec() is None
    assert "response" in UserInputNode(id="a", message="ok?").port_schema("approved")["properties"]


def test_a_parked_activation_waits_for_the_inbox_and_keeps_the_step_that_asked() -> None:
    config = validate_config(
        {"name": "p", "kind": "structured", "nodes": [
            {"id": "ask", "type": "user_input", "message": "ok?"},
            {"id": "yes", "type": "finish", "output": 1}, {"id": "no", "type": "finish", "output": 0}],
         "edges": [{"from": "ask", "port": "approved", "to": "yes"}, {"from": "ask", "port": "rejected", "to": "no"}]}
    )  # fmt: skip
    assert isinstance(config, StructuredConfig)
    t = park_for_answer(config, {"node": "ask"}, Activation("ask"), 4, 90.0, {"status": "pending"})
    assert (t.status, t.reason, t.step_status) == (RunStatus.WAITING, AWAITING_EVENT, "completed")
    (timer,) = frontier.load(t.state, config.graph).timers
    assert timer.on_event and timer.secs == 90.0 and timer.retry == Activation("ask", asked=4)
    released = frontier.release(config.graph, frontier.load(t.state, config.graph), None, inbox_news=True)
    assert released.ready == (Activation("ask", asked=4),), "a delivery runs it again, knowing step 4"
    assert frontier.dump(released, {}, config.graph)["ready"] == [{"node": "ask", "via": [], "asked": 4}]
