"""What the teacher reads of a MiniWoB++ page: the banner's utterance and every element the task page
draws, with its box and a point where a click reaches it (``Snapshot``), taken in the shadow page by
``SNAPSHOT`` (a script run in the wrapper page, reading its frame) and parsed here. The solvers read only
this. Coordinates are the task page's CSS pixels (the frame's 160x210 viewport, before the wrapper's zoom).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

SNAPSHOT = r"""(function (EXTRA, HIT) {
  var f = document.getElementById("task"), d = f && f.contentDocument, w = f && f.contentWindow;
  if (!d || !d.body) return null;
  var W = d.documentElement.clientWidth, H = d.documentElement.clientHeight;
  var nodes = Array.prototype.slice.call(d.body.querySelectorAll("*")), index = new Map(), out = [], kept = [];
  var SKIP = {SCRIPT: 1, STYLE: 1, BR: 1, NOSCRIPT: 1};
  function reaches(el, x, y) {
    if (x < 0 || y < 0 || x >= W || y >= H) return false;
    var hit = d.elementFromPoint(x, y);
    return !!hit && (hit === el || el.contains(hit) || (hit.control && hit.control === el));
  }
  function point(el, r) {  // the box's centre if a click there reaches el, else the first of a 7x7 grid,
    var cx = r.left + r.width / 2, cy = r.top + r.height / 2;  // else the visible pixel deepest inside
    if (reaches(el, cx, cy)) return [cx, cy];
    for (var i = 1; i < 8; i++) for (var j = 1; j < 8; j++) {
      var x = r.left + r.width * j / 8, y = r.top + r.height * i / 8;
      if (reaches(el, x, y)) return [x, y];
    }
    return deepest(el, r);
  }
  function deepest(el, r) {  // a sliver left uncovered (a button under another): its pixels, eroded
    var x0 = Math.max(0, Math.floor(r.left)), y0 = Math.max(0, Math.floor(r.top));
    var x1 = Math.min(W, Math.ceil(r.right)), y1 = Math.min(H, Math.ceil(r.bottom));
    if (x1 <= x0 || y1 <= y0 || (x1 - x0) * (y1 - y0) > 6400) return null;
    var mask = [], any = false;
    for (var y = y0; y < y1; y++) {
      var row = [];
      for (var x = x0; x < x1; x++) { var hit = reaches(el, x + 0.5, y + 0.5); row.push(hit); any = any || hit; }
      mask.push(row);
    }
    if (!any) return null;
    while (true) {  // erode until nothing is left: a pixel of the last layer standing is the deepest
      var first = null, next = [], more = false;
      for (var b = 0; b < mask.length; b++) {
        var line = [];
        for (var a = 0; a < mask[b].length; a++) {
          if (mask[b][a] && first === null) first = [x0 + a + 0.5, y0 + b + 0.5];
          var keep = mask[b][a] && b > 0 && b < mask.length - 1 && a > 0 && a < mask[b].length - 1 &&
                     mask[b - 1][a] && mask[b + 1][a] && mask[b][a - 1] && mask[b][a + 1];
          line.push(keep);
          more = more || keep;
        }
        next.push(line);
      }
      if (!more) return first;
      mask = next;
    }
  }
  function own(el) {
    var s = "";
    for (var c = el.firstChild; c; c = c.nextSibling) if (c.nodeType === 3) s += c.nodeValue;
    return s.replace(/\s+/g, " ").trim();
  }
  nodes.forEach(function (el) {
    if (SKIP[el.tagName] || el.id === "reward-display" || el.id === "click-canvas") return;
    var r = el.getBoundingClientRect(), cs = w.getComputedStyle(el);
    if (r.width <= 0 || r.height <= 0 || cs.visibility === "hidden" || cs.display === "none") return;
    var p = el.parentElement, attrs = {};
    for (var k = 0; k < el.attributes.length; k++) {
      var a = el.attributes[k];
      if (/^(data-|aria-)|^(title|href|role|for|fill|stroke|src|alt|placeholder)$/.test(a.name)) {
        attrs[a.name] = a.value;
      }
    }
    index.set(el, out.length);
    kept.push(el);
    out.push({
      tag: el.tagName.toLowerCase(), id: el.id || "", cls: typeof el.className === "string" ? el.className : "",
      text: ((el.innerText !== undefined ? el.innerText : el.textContent) || "").replace(/\s+/g, " ").trim()
        .slice(0, 300),
      own: own(el), value: el.value !== undefined && el.value !== null ? String(el.value) : null,
      type: el.type || "", name: el.name || "", checked: !!el.checked, disabled: !!el.disabled,
      focused: d.activeElement === el, parent: p && index.has(p) ? index.get(p) : -1,
      box: [r.left, r.top, r.width, r.height], point: point(el, r), attrs: attrs,
      bg: cs.backgroundColor, color: cs.color
    });
  });
  var q = d.getElementById("query"), extra = null;
  if (EXTRA) { try { extra = JSON.parse(JSON.stringify(w.eval(EXTRA))); } catch (e) { extra = null; } }
  var ended = w.core ? w.core.EP_TIMER === null : true, hits = null;
  if (HIT >= 0 && HIT < kept.length) {  // where a click reaches element HIT: a row of 0s and 1s per pixel row
    hits = [];
    for (var y = 0; y < H; y++) {
      var row = "";
      for (var x = 0; x < W; x++) row += reaches(kept[HIT], x + 0.5, y + 0.5) ? "1" : "0";
      hits.push(row);
    }
  }
  return {utterance: q ? q.innerText.replace(/\s+/g, " ").trim() : "", elements: out, extra: extra,
          ended: ended, hits: hits, raw: ended && typeof w.WOB_RAW_REWARD_GLOBAL === "number" ? w.WOB_RAW_REWARD_GLOBAL : null};
})"""


def snapshot_script(extra: str | None = None, hit: int = -1) -> str:
    """``SNAPSHOT`` called, with ``extra`` (a JavaScript expression read in the task's window) if any, and
    with ``hit`` (an element's index) the pixels where a click reaches that element."""
    return f"{SNAPSHOT}({json.dumps(extra)}, {int(hit)})"


@dataclass(frozen=True)
class Element:
    """One drawn element of the task page."""

    i: int
    tag: str
    id: str
    cls: str
    text: str
    """Its rendered text (``innerText``; SVG elements: ``textContent``), whitespace collapsed."""
    own: str
    """Its own text nodes only (not its children's)."""
    value: str | None
    type: str
    name: str
    checked: bool
    disabled: bool
    focused: bool
    parent: int
    box: tuple[float, float, float, float]
    """x, y, width, height."""
    point: tuple[float, float] | None
    """Where a click reaches it (its centre when nothing covers that); None: covered or scrolled away."""
    attrs: Mapping[str, str] = field(default_factory=dict)
    bg: str = ""
    color: str = ""

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(self.cls.split())

    @property
    def centre(self) -> tuple[float, float]:
        x, y, w, h = self.box
        return x + w / 2, y + h / 2


@dataclass(frozen=True)
class Snapshot:
    utterance: str
    elements: tuple[Element, ...]
    ended: bool
    """The page's episode is over (``core.endEpisode`` ran)."""
    raw: float | None = None
    """Once ended, the page's raw reward (what the wrapper reports to the episode's verifier)."""
    extra: Any = None
    """What the solver's ``extra`` expression read in the task's window (JSON), if it has one."""
    hits: tuple[str, ...] | None = None
    """Asked for one element: per pixel row of the page, ``1`` where a click reaches it, else ``0``."""

    def __iter__(self) -> Iterator[Element]:
        return iter(self.elements)

    def find(self, tag: str | None = None, **where: Any) -> list[Element]:
        """The elements of ``tag`` (any, if None) whose fields equal ``where``'s."""
        return [
            e
            for e in self.elements
            if (tag is None or e.tag == tag) and all(getattr(e, k) == v for k, v in where.items())
        ]

    def by_id(self, id: str) -> Element | None:
        return next((e for e in self.elements if e.id == id), None)

    def parent(self, e: Element) -> Element | None:
        return self.elements[e.parent] if e.parent >= 0 else None

    def inside(self, outer: Element) -> list[Element]:
        """The elements below ``outer`` (its descendants), in document order."""
        found: list[Element] = []
        for e in self.elements[outer.i + 1 :]:
            p = e.parent
            while p > outer.i:
                p = self.elements[p].parent
            if p != outer.i:
                break
            found.append(e)
        return found


def parse(raw: Mapping[str, Any]) -> Snapshot:
    """A snapshot from ``SNAPSHOT``'s JSON."""
    elements = tuple(
        Element(
            i=i,
            tag=e["tag"],
            id=e["id"],
            cls=e["cls"],
            text=e["text"],
            own=e["own"],
            value=e["value"],
            type=e["type"],
            name=e["name"],
            checked=e["checked"],
            disabled=e["disabled"],
            focused=e["focused"],
            parent=e["parent"],
            box=tuple(e["box"]),  # type: ignore[arg-type]
            point=tuple(e["point"]) if e["point"] else None,  # type: ignore[arg-type]
            attrs=e.get("attrs", {}),
            bg=e.get("bg", ""),
            color=e.get("color", ""),
        )
        for i, e in enumerate(raw["elements"])
    )
    return Snapshot(utterance=raw["utterance"], elements=elements, ended=bool(raw["ended"]),
                    raw=raw.get("raw"), extra=raw.get("extra"),
                    hits=tuple(raw["hits"]) if raw.get("hits") else None)  # fmt: skip


_QUOTED = re.compile(r'"([^"]*)"')


def quoted(utterance: str) -> list[str]:
    """The double-quoted phrases of an utterance, in order."""
    return _QUOTED.findall(utterance)
