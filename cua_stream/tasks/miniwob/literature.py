"""The MiniWoB++ results others published, and the task subsets they were measured on, to stand our
numbers beside (docs/miniwob.md, the eval tables, cites each source). Data only.

The subsets are the task lists as their authors' code or a third party's transcription of it names them:

- Pix2Act's 59 tasks: ``pix2act/tasks/miniwob/eval/tasks.txt`` of github.com/google-deepmind/pix2act.
  One of them, ``drag-item``, is not a task of MiniWoB++ 1.1.0: its description ("drag an item in a
  specified direction") is the package's ``drag-circle``, which stands in for it here.
- WebGUM's (and WebN-T5's) 56 tasks: ``webgum_tasks`` in ``src/agentlab/experiments/task_collections.py``
  of github.com/ServiceNow/AgentLab, a transcription, not checked against the paper's own table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PIX2ACT_59 = (
    "bisect-angle", "choose-date-nodelay", "circle-center", "click-button", "click-button-sequence",
    "click-checkboxes", "click-checkboxes-large", "click-checkboxes-soft", "click-checkboxes-transfer",
    "click-collapsible-2-nodelay", "click-collapsible-nodelay", "click-color", "click-dialog", "click-dialog-2",
    "click-link", "click-option", "click-pie-nodelay", "click-shades", "click-shape", "click-tab", "click-tab-2",
    "click-tab-2-easy", "click-tab-2-hard", "click-tab-2-medium", "click-test", "click-test-2",
    "click-test-transfer", "click-widget", "count-shape", "count-sides", "drag-box", "drag-circle",
    "drag-items", "drag-items-grid", "drag-shapes", "drag-sort-numbers", "email-inbox-delete",
    "email-inbox-important", "enter-date", "enter-text-2", "enter-time", "find-midpoint", "grid-coordinate",
    "identify-shape", "navigate-tree", "number-checkboxes", "resize-textarea", "right-angle", "simple-algebra",
    "simple-arithmetic", "text-transform", "tic-tac-toe", "unicode-test", "use-autocomplete-nodelay",
    "use-colorwheel", "use-colorwheel-2", "use-slider", "use-slider-2", "visual-addition",
)  # fmt: skip
WEBGUM_56 = (
    "book-flight", "choose-date", "choose-date-easy", "choose-date-medium", "choose-list", "click-button",
    "click-button-sequence", "click-checkboxes", "click-checkboxes-large", "click-checkboxes-soft",
    "click-checkboxes-transfer", "click-collapsible", "click-collapsible-2", "click-color", "click-dialog",
    "click-dialog-2", "click-link", "click-menu", "click-option", "click-pie", "click-scroll-list",
    "click-shades", "click-shape", "click-tab", "click-tab-2", "click-tab-2-hard", "click-test",
    "click-test-2", "click-widget", "count-shape", "email-inbox", "email-inbox-forward-nl",
    "email-inbox-forward-nl-turk", "email-inbox-nl-turk", "enter-date", "enter-password", "enter-text",
    "enter-text-dynamic", "enter-time", "focus-text", "focus-text-2", "grid-coordinate", "guess-number",
    "identify-shape", "login-user", "login-user-popup", "multi-layouts", "multi-orderings", "navigate-tree",
    "search-engine", "social-media", "social-media-all", "social-media-some", "tic-tac-toe",
    "use-autocomplete", "use-spinner",
)  # fmt: skip
SUBSETS: Mapping[str, tuple[str, ...]] = {"WebGUM/WebN-T5 56": WEBGUM_56, "Pix2Act 59": PIX2ACT_59}


@dataclass(frozen=True)
class Published:
    who: str
    success: str
    """Mean success over the tasks, as published (a percentage, or words where no number applies)."""
    tasks: str
    source: str


PUBLISHED = (
    Published("Human (CC-Net paper's human baseline)", "93.5 %", "104 tasks",
              "Humphreys et al. 2022, A data-driven approach for learning to control computers, arXiv:2202.08137"),
    Published("CC-Net (pixels + DOM, ~2.4M demonstrations + RL)", "human level", "104 tasks",
              "Humphreys et al. 2022, arXiv:2202.08137"),
    Published("Pix2Act (pixels only)", "96.2 %", "Pix2Act 59",
              "Shaw et al. 2023, From pixels to UI actions, arXiv:2306.00245"),
    Published("WebGUM (HTML + screenshot)", "94.2 %", "WebGUM/WebN-T5 56",
              "Furuta et al. 2023, Multimodal web navigation with instruction-finetuned foundation models, "
              "arXiv:2305.11854"),
    Published("SeeClick (screenshots)", "69.4 %", "55 tasks",
              "Cheng et al. 2024, SeeClick, arXiv:2401.10935"),
)  # fmt: skip
