"""The fake model's side of long-term memory: it answers the engine's memory extraction call by a
small set of rules, and reads the memories a run is shown.

**Extraction.** A request whose system prompt starts with `[memory-extraction]` carries, as its
user message, the JSON `{"kinds": [...], "held": [{"id", "kind", "statement"}], "conversation":
[{"role", "content"}]}` (engine/memory.py). A script answers it with its `memory_extraction` step;
the step `{"extract_memory": true}` stands for the JSON `{"changes": [...]}` these rules give.
Only the user's turns are read (what the assistant said is not something the user told), in
order, and three things are recognised:

- where the user lives: "我在成都", "我住在成都", "我搬到重庆了", "I live in Chengdu", "I moved
  to Chongqing" → the fact "住在成都" / "Lives in Chengdu". A Chinese place must be a known city
  or end in 市, and end its clause: "我在成都南站" says where the user is, not where they live,
  and gives nothing;
- likes: "我喜欢猫", "我不喜欢香菜", "I like jazz" → the preference "喜欢猫", "不喜欢香菜",
  "Likes jazz" (not of a pronoun: "I like it" tells nothing);
- the answer language: "请用英文回答", "Please answer in English" → the instruction "用英文回答",
  "Answer in English".

Each statement is about a topic (the residence, liking one thing, the language), and the last
one the user said about a topic is the one that counts. Against what is held: a held statement
about the same topic is kept when it says the same, updated (by its id) when it says something
else ("我搬到重庆了" turns "住在成都" into "住在重庆"); a new topic is added. Kinds the request
does not ask for are left out, nothing is proposed twice, held memories the conversation does
not touch get no change, and a request that is not the expected JSON gets no change at all: a
careful extractor proposes nothing rather than a guess.

**Memories shown.** The engine places them in a user-role block: MEMORY_OPEN, a line of heading,
one `- kind: "statement"` line each (the statement a JSON string), most relevant first, and
MEMORY_CLOSE (Conversation.memory holds it); `shown_memories` reads the statements back, and a
scenario's `recall` regex takes its groups from the first one it matches.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from fakellm.conversation import Conversation

# The engine's contract (engine/memory.py); fakellm stands alone, so the strings are repeated.
EXTRACTION_MARKER = "[memory-extraction]"
MEMORY_OPEN = "<user_memory>"
MEMORY_CLOSE = "</user_memory>"
KINDS = ("fact", "preference", "event", "instruction")

# Cities named without 市; any other place counts only when it says 市 ("我住在绵阳市").
CITIES = (
    "北京 上海 天津 重庆 成都 广州 深圳 杭州 南京 武汉 西安 苏州 长沙 郑州 青岛 济南 沈阳 大连 哈尔滨 "
    "长春 昆明 贵阳 南宁 福州 厦门 合肥 南昌 太原 石家庄 兰州 西宁 银川 乌鲁木齐 拉萨 呼和浩特 海口 "
    "三亚 宁波 无锡 佛山 东莞 珠海 绵阳 乐山 香港 澳门 台北"
).split()
_CITY = rf"(?:(?P<city>{'|'.join(CITIES)})市?|(?P<other>[\u4e00-\u9fff]{{2,6}}?)市)"
# A clause ends at punctuation, a space or the end; "了" may close it ("我搬到重庆了").
_CLAUSE_END = r"了?(?=$|[\s，,。.！!？?；;、])"
# What a liked thing may hold: no punctuation, and no braces (the answer is a scripted reply,
# whose placeholders must not be fed from what a user typed).
_THING = r"[^\s，,。.！!？?；;、{}]"
_NEXT_CLAUSE = re.compile(r"\s+(?:and|but|because|so|when|if)\s", re.IGNORECASE)
_PRONOUNS = {"it", "this", "that", "them", "you", "him", "her", "to"}


@dataclass(frozen=True)
class Said:
    """A statement the user made, about a topic a later statement of the same topic replaces."""

    kind: str
    topic: str
    statement: str


def _residence_zh(found: re.Match) -> Said:
    return Said("fact", "residence", f"住在{found['city'] or found['other']}")


def _residence_en(found: re.Match) -> Said:
    return Said("fact", "residence", f"Lives in {found['city']}")


def _likes_zh(found: re.Match) -> Said:
    return Said("preference", f"likes:{found['thing']}", f"{found['neg'] or ''}喜欢{found['thing']}")


def _likes_en(found: re.Match) -> Said | None:
    # One thing: "I like jazz and I live in Chengdu" likes jazz.
    thing = _NEXT_CLAUSE.split(found["thing"], maxsplit=1)[0].strip()
    if thing.split()[0].casefold() in _PRONOUNS:
        return None
    verb = "Doesn't like" if found["neg"] else "Likes"
    return Said("preference", f"likes:{thing.casefold()}", f"{verb} {thing}")


def _language_zh(found: re.Match) -> Said:
    return Said("instruction", "language", f"用{found['lang']}回答")


def _language_en(found: re.Match) -> Said:
    return Said("instruction", "language", f"Answer in {found['lang'].capitalize()}")


RULES = [
    (re.compile(rf"我(?:现在)?(?:住在|在|搬到了?|搬去了?|搬家到了?){_CITY}{_CLAUSE_END}"), _residence_zh),
    (
        re.compile(
            r"\bI(?:'ve| have)? (?:live|am living|'m living|moved|relocated) (?:in|to) "
            r"(?P<city>[A-Z][A-Za-z'-]+(?: [A-Z][A-Za-z'-]+){0,2})"
        ),
        _residence_en,
    ),
    (re.compile(rf"我(?P<neg>不)?喜欢(?!的)(?P<thing>{_THING}{{1,30}}?){_CLAUSE_END}"), _likes_zh),
    (re.compile(rf"\bI (?P<neg>don't |do not )?(?:like|love) (?P<thing>{_THING}[^,.!?;\n{{}}]{{0,40}})"), _likes_en),
    (re.compile(r"请(?:用|以)(?P<lang>简体中文|繁体中文|中文|英文|英语|汉语|日文|日语)回答"), _language_zh),
    (
        re.compile(
            r"\b(?:answer|reply|respond) in (?P<lang>English|Chinese|Japanese|French|German|Spanish)\b", re.IGNORECASE
        ),
        _language_en,
    ),
]
# The topic of a statement these rules wrote, so a held memory is known when the user speaks of
# the same thing again; a held statement of another shape is never touched.
HELD_TOPICS = [
    (re.compile(r"^(?:住在|Lives in )(?P<x>.+)$"), lambda x: "residence"),
    (re.compile(r"^不?喜欢(?P<x>.+)$"), lambda x: f"likes:{x}"),
    (re.compile(r"^(?:Likes|Doesn't like) (?P<x>.+)$"), lambda x: f"likes:{x.casefold()}"),
    (re.compile(r"^(?:用.+回答|Answer in .+)$"), lambda x: "language"),
]


def said_in(text: str) -> list[Said]:
    """What one user turn states, in the order it says it."""
    found = []
    for pattern, read in RULES:
        for match in pattern.finditer(text):
            said = read(match)
            if said is not None:
                found.append((match.start(), said))
    return [said for _, said in sorted(found, key=lambda pair: pair[0])]


def topic_of(statement: str) -> str | None:
    for pattern, topic in HELD_TOPICS:
        found = pattern.match(statement)
        if found:
            return topic(found.groupdict().get("x") or "")
    return None


def _held(request: dict) -> list[dict]:
    held = request.get("held")
    return [
        h
        for h in (held if isinstance(held, list) else [])
        if isinstance(h, dict) and isinstance(h.get("id"), str) and isinstance(h.get("statement"), str)
    ]


def _user_turns(request: dict) -> list[str]:
    turns = request.get("conversation")
    return [
        t["content"]
        for t in (turns if isinstance(turns, list) else [])
        if isinstance(t, dict) and t.get("role") == "user" and isinstance(t.get("content"), str)
    ]


def extraction_changes(request) -> list[dict]:
    """The changes a careful extractor proposes for an extraction request (module docstring)."""
    if not isinstance(request, dict):
        return []
    kinds = request.get("kinds")
    wanted = {k for k in kinds if isinstance(k, str)} if isinstance(kinds, list) and kinds else set(KINDS)
    latest: dict[str, Said] = {}
    for text in _user_turns(request):
        for said in said_in(text):
            latest.pop(said.topic, None)  # re-inserted: the order of the last mentions
            latest[said.topic] = said
    held = _held(request)
    by_topic: dict[str, dict] = {}
    for memory in held:
        by_topic.setdefault(topic_of(memory["statement"]) or "", memory)
    statements = {memory["statement"]: memory for memory in held}
    changes = []
    for said in latest.values():
        if said.kind not in wanted:
            continue
        same = statements.get(said.statement)
        if same is not None:
            changes.append({"action": "keep", "id": same["id"]})
        elif said.topic in by_topic:
            memory = by_topic[said.topic]
            changes.append({"action": "update", "id": memory["id"], "kind": said.kind, "statement": said.statement})
        else:
            changes.append({"action": "add", "kind": said.kind, "statement": said.statement})
    return changes


def is_extraction(conversation: Conversation) -> bool:
    return conversation.system.startswith(EXTRACTION_MARKER)


def extraction_step(step: dict, conversation: Conversation) -> dict:
    """The reply step an `extract_memory` step stands for: the rules' changes as JSON."""
    try:
        request = json.loads(conversation.last_user_text)
    except (ValueError, RecursionError):
        request = None
    reply = {key: value for key, value in step.items() if key != "extract_memory"}
    reply["content"] = json.dumps({"changes": extraction_changes(request)}, ensure_ascii=False)
    return reply


def shown_memories(text: str) -> list[str]:
    """The statements of the memory block in `text` (Conversation.memory), most relevant first."""
    lines = text.splitlines()
    try:
        start = lines.index(MEMORY_OPEN)
    except ValueError:
        return []
    statements = []
    # Past the heading, to the end of the block.
    for line in lines[start + 2 :]:
        if line == MEMORY_CLOSE or not line.startswith("- "):
            break
        _kind, _colon, quoted = line[2:].partition(": ")
        try:
            statement = json.loads(quoted)
        except ValueError:
            break
        if isinstance(statement, str):
            statements.append(statement)
    return statements


def recalled(pattern: re.Pattern, conversation: Conversation) -> dict | None:
    """The named groups of the first shown memory `pattern` finds, or None when none matches."""
    for statement in shown_memories(conversation.memory):
        found = pattern.search(statement)
        if found:
            return {key: value or "" for key, value in found.groupdict().items()}
    return None
