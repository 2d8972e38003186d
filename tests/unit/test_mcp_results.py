"""What an MCP tool's answer becomes on the step: text, content blocks without their bytes,
structured content; an error answer is ``mcp_tool_error``; limits cut, and say so."""

from __future__ import annotations

import base64

import pytest
from mcp.types import CallToolResult, EmbeddedResource, ImageContent, TextContent, TextResourceContents

from agentflow.core.errors import StepFailure
from agentflow.core.mcp import McpServer
from agentflow.integrations.mcp_client import MAX_TEXT, _result

SERVER = McpServer(name="srv", command=["srv"])


def test_text_blocks_are_joined_and_media_is_kept_by_size() -> None:
    image = base64.b64encode(b"\x89PNG" * 300).decode()
    result = CallToolResult(
        content=[
            TextContent(type="text", text="first"),
            ImageContent(type="image", data=image, mime_type="image/png"),
            EmbeddedResource(
                type="resource", resource=TextResourceContents(uri="file:///a.txt", text="inside")
            ),
            TextContent(type="text", text="second"),
        ],
        structured_content={"count": 2},
    )
    out = _result(SERVER, "look", result).to_json()
    assert out["text"] == "first\n\nsecond"
    assert out["structured"] == {"count": 2}
    assert out["content"][1] == {"type": "image", "mimeType": "image/png", "bytes": 1200}
    assert out["content"][2]["resource"]["text"] == "inside"
    assert "truncated" not in out


def test_an_error_answer_fails_with_its_text_and_is_not_retried() -> None:
    result = CallToolResult(content=[TextContent(type="text", text="no such repo")], is_error=True)
    with pytest.raises(StepFailure) as info:
        _result(SERVER, "open", result)
    assert (info.value.info.code, info.value.retryable) == ("mcp_tool_error", False)
    assert info.value.info.message == "MCP tool srv/open answered with an error: no such repo"
    assert info.value.info.details == {"server": "srv", "tool": "open", "text": "no such repo"}


def test_what_is_too_big_to_record_is_cut_and_marked() -> None:
    result = CallToolResult(
        content=[TextContent(type="text", text="x" * (MAX_TEXT + 10))],
        structured_content={"blob": "y" * 1_100_000},
    )
    out = _result(SERVER, "dump", result).to_json()
    assert len(out["text"]) == MAX_TEXT and len(out["content"][0]["text"]) == MAX_TEXT
    assert "structured" not in out and out["truncated"] is True
