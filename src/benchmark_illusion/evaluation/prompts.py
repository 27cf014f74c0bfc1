"""Prompts for the three formats, one convention for where the answer starts.

Every format ends its prompt with the same pre-filled answer prefix (default `Answer:`): with a
chat template it is written at the start of the assistant turn, without one it ends the plain
prompt. The next token is therefore the answer's first token, which is where the gold
first-token rank is measured and where MC options are appended (after one space when the
prefix does not end in whitespace). Instruct models otherwise open with a lead-in ("The answer
is ..."), and a rank at that position says little (median ~45 for a dense 135M model).

  open        passage + question                    -> greedy generation
  candidates  passage + question + the options       -> greedy generation
              (style 'letters': "A. text" .. "D. text"; style 'bullets': "- text", no letters)
  mc          the `open` prompt, each option appended -> log-likelihood scoring
  mc_nopassage  the `mc` prompt without the passage   -> log-likelihood scoring (the guessing
              control: what the question and the options alone give)
  oneshot     one worked example (same language, another passage), then the `open` prompt
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

LETTERS = "ABCDEFGH"

OPEN_INSTRUCTION = (
    "Read the passage and answer the question with the shortest span of words copied from the "
    "passage."
)
CANDIDATES_INSTRUCTION = (
    "Read the passage and answer the question. "
    "Choose one of the options and reply with the option's text only."
)
CANDIDATES_STYLES = ("letters", "bullets")


@dataclass(frozen=True)
class PromptSettings:
    """How prompts are rendered; the same for every checkpoint of a run.

    answer_prefix: pre-filled start of the answer (shared by all formats).
    chat_template: 'auto' (use the tokenizer's template when it has one), True or False.
    system_prompt: replaces the template's default system turn when not None.
    candidates_style: how `candidates` lists the options: 'letters' ("A. text") or 'bullets'
      ("- text": no letter to answer with, the model must write the option's text).
    template_kwargs: extra keyword arguments for the chat template (`apply_chat_template`).
      A template that reads `enable_thinking` (Qwen3) gets enable_thinking=False unless set
      here: the pre-filled answer prefix must not land where the model expects to think.
    """

    answer_prefix: str = "Answer:"
    chat_template: str | bool = "auto"
    system_prompt: str | None = None
    candidates_style: str = "bullets"
    template_kwargs: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.candidates_style not in CANDIDATES_STYLES:
            raise ValueError(
                f"prompt.candidates_style must be one of {CANDIDATES_STYLES}, "
                f"not {self.candidates_style!r}"
            )

    @classmethod
    def from_params(cls, p: dict) -> PromptSettings:
        """From a rule's params.prompt (config `prompt`)."""
        return cls(
            p["answer_prefix"],
            p["chat_template"],
            p["system_prompt"],
            p["candidates_style"],
            dict(p["template_kwargs"]),
        )

    def chat_template_kwargs(self, tokenizer) -> dict:
        """template_kwargs, with enable_thinking=False added when the template reads it and it is
        unset."""
        kwargs = dict(self.template_kwargs)
        if (
            "enable_thinking" in (getattr(tokenizer, "chat_template", None) or "")
            and "enable_thinking" not in kwargs
        ):
            kwargs["enable_thinking"] = False
        return kwargs

    @property
    def continuation_sep(self) -> str:
        """Text between the answer prefix and the answer itself."""
        p = self.answer_prefix
        return " " if p and not p[-1].isspace() else ""


def question_line(item: dict) -> str:
    """The item's question as every format writes it (the last part of `item_body`)."""
    return f"Question: {item['question']}"


def item_body(item: dict) -> str:
    """The item's own text, the passage and the question, as every format writes it.

    The one place this text is spelled: concepts.item_prompt finds it in the rendered prompt to
    tell the item's tokens from the template's.
    """
    return f"Passage: {item['context']}\n\n{question_line(item)}"


def user_message(item: dict, fmt: str, candidates_style: str = "letters") -> str:
    """The user turn for one item in `open`/`mc` (same text), `mc_nopassage` (that text without
    the passage) or `candidates` format."""
    if fmt == "mc_nopassage":
        # the `mc` prompt with the passage left out, nothing else changed (the instruction
        # included): the only difference between the two is the passage
        return f"{OPEN_INSTRUCTION}\n\n{question_line(item)}"
    body = item_body(item)
    if fmt in ("open", "mc"):
        return f"{OPEN_INSTRUCTION}\n\n{body}"
    if fmt == "candidates":
        if candidates_style == "letters":
            opts = "\n".join(f"{LETTERS[i]}. {o}" for i, o in enumerate(item["options"]))
        else:
            opts = "\n".join(f"- {o}" for o in item["options"])
        return f"{CANDIDATES_INSTRUCTION}\n\n{body}\n\nOptions:\n{opts}"
    raise ValueError(f"unknown format {fmt!r}")


def uses_chat_template(tokenizer, settings: PromptSettings) -> bool:
    """Whether prompts go through the tokenizer's chat template."""
    has = bool(getattr(tokenizer, "chat_template", None))
    if settings.chat_template is True and not has:
        raise ValueError("prompt.chat_template is true but the tokenizer has no chat template")
    return has if settings.chat_template == "auto" else bool(settings.chat_template)


def render(tokenizer, settings: PromptSettings, turns: list[tuple[str, str]], user: str) -> str:
    """Full prompt text ending with the answer prefix.

    turns: earlier (user, assistant_answer) pairs, e.g. the one-shot example.
    """
    prefix = settings.answer_prefix
    sep = settings.continuation_sep
    if uses_chat_template(tokenizer, settings):
        messages = []
        if settings.system_prompt is not None:
            messages.append({"role": "system", "content": settings.system_prompt})
        for u, a in turns:
            messages += [
                {"role": "user", "content": u},
                {"role": "assistant", "content": f"{prefix}{sep}{a}"},
            ]
        messages.append({"role": "user", "content": user})
        text = tokenizer.apply_chat_template(
            messages,
            tokenize=False,
            add_generation_prompt=True,
            **settings.chat_template_kwargs(tokenizer),
        )
        return text + prefix
    head = "".join(f"{u}\n\n{prefix}{sep}{a}\n\n" for u, a in turns)
    return f"{head}{user}\n\n{prefix}"


def build_prompt(
    tokenizer, settings: PromptSettings, item: dict, fmt: str, exemplar: dict | None = None
) -> str:
    """Prompt text for `item` in format `fmt` ('open', 'candidates', 'mc', 'mc_nopassage',
    'oneshot')."""
    if fmt == "oneshot":
        if exemplar is None:
            raise ValueError(f"item {item.get('item_id')!r}: oneshot needs an exemplar")
        turns = [(user_message(exemplar, "open"), exemplar["answers"][0])]
        return render(tokenizer, settings, turns, user_message(item, "open"))
    return render(tokenizer, settings, [], user_message(item, fmt, settings.candidates_style))


def adds_special_tokens(tokenizer, settings: PromptSettings) -> bool:
    """Chat templates write their own special tokens; plain prompts let the tokenizer add BOS."""
    return not uses_chat_template(tokenizer, settings)


def prompt_id(text: str) -> str:
    """Short stable id of a prompt's text."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]
