"""Free-text replies to requests, read by a model (pure data; seed 001, section 7).

A person who answers a request's email in their own words sends text, not a button press.
The workflow's model reads it beside the request and answers with a score (how surely the
text answers this request) and the answer it found. The score decides, with the seed's
thresholds: ``relevant`` (>= 0.7) answers the request, ``filtered`` (<= 0.3) is ignored
(spam, an out-of-office, a thank-you), ``uncertain`` is held for a person in the inbox.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, Literal, Protocol

from agentflow.core.frozen import frozen

RELEVANT_AT = 0.7
FILTERED_AT = 0.3
Label = Literal["relevant", "filtered", "uncertain"]
LABELS: tuple[Label, ...] = ("relevant", "filtered", "uncertain")


def label_for(score: float) -> Label:
    """The label of a score: relevant at 0.7 or more, filtered at 0.3 or less, else uncertain."""
    if score >= RELEVANT_AT:
        return "relevant"
    if score <= FILTERED_AT:
        return "filtered"
    return "uncertain"


@frozen
class ReplyQuestion:
    """What the model is asked about one reply.

    Attributes:
        request: the request (``kind``, ``message``, ``spec``, ``tool``, ``arguments``).
        text: the reply's own words.
        sender: who wrote it.
        model: the model to ask (``provider:model``; None: the default).
    """

    request: dict[str, Any]
    text: str
    sender: str
    model: str | None = None


@frozen
class ReplyVerdict:
    """What the model read in a reply.

    Attributes:
        score: 0 to 1, how surely the text answers the request.
        approved: for approvals and reviews, the decision it found (None: none).
        response: for inputs and selections (and a review's edit), the value it found.
        reason: why, in words a person can check (a rejection's reason, too).
        details: the model, its tokens and cost.
    """

    score: float
    approved: bool | None
    response: Any
    reason: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> Label:
        """The score's label."""
        return label_for(self.score)


class ReplyJudge(Protocol):
    """Reads a reply (``agentflow.agent.reply_judge.ModelReplyJudge`` asks the model)."""

    async def read(self, question: ReplyQuestion) -> ReplyVerdict:
        """Read it; raise to have it read again later."""
        ...
