"""The chat format both sides of post-training read: a chat set has the layout of every
data rule (rules/common/corpus.py), but a line holds a conversation,
`{"messages": [{"role": "user", "content": "..."}, {"role": "assistant", ...}, ...]}`, as
Levanter's chat datasets and Hugging Face chat templates take it; and the chat template
sft_lm renders it with, which marks the assistant's part for the loss."""

from __future__ import annotations

import re
from typing import Any

MESSAGES = "messages"
ROLES = ("system", "user", "assistant")
ASSISTANT = "assistant"
SHORTENED = " ..."  # how chat_data ends an answer it shortens

# Each conversation as `role:` lines, the assistant's part (its content and the end of
# sequence token, so that the model learns to stop) between generation tags. A newline
# before each content keeps the tokens of the prompt and of the answer apart.
DEFAULT_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{{ message['role'] }}:\n"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] }}{{ eos_token }}{% endgeneration %}"
    "{% else %}{{ message['content'] }}\n{% endif %}{% endfor %}"
)
# How transformers (and Levanter) find the assistant's part of a template.
GENERATION_TAG = re.compile(r"\{%-?\s*generation\s*-?%\}")


def chat_problem(record: Any) -> str | None:
    """Why a line's record is not a conversation sft_lm can learn from, or None."""
    messages = record.get(MESSAGES) if isinstance(record, dict) else None
    if not isinstance(messages, list):
        return 'no "messages" list (a chat line is {"messages": [{"role": "user", "content": "..."}, ...]})'
    for index, message in enumerate(messages):
        if not (isinstance(message, dict) and message.get("role") in ROLES and isinstance(message.get("content"), str)):
            shown = repr(message)[:80]
            return f'message {index} is not {{"role": "system"|"user"|"assistant", "content": <a string>}}: {shown}'
    if not any(message["role"] == ASSISTANT and message["content"] for message in messages):
        return "no assistant message with content: nothing to learn from"
    return None
