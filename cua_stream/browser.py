"""The browser every episode's desktop runs, wherever it runs (the local desktop's namespaces, a task's
container image): Chromium's managed policy, so that no sign-in prompt, translation bar or first-run tab
takes the keyboard focus from the page mid-episode, and so that the agent cannot run script of its own in
the task's page: ``javascript:`` URLs typed into the address bar are blocked (a task's page reports what
the user did to its server, and a script could report anything; docs/miniwob.md, security)."""

from __future__ import annotations

import json

CHROMIUM_POLICY = json.dumps(
    {
        "BrowserSignin": 0,
        "SyncDisabled": True,
        "PasswordManagerEnabled": False,
        "TranslateEnabled": False,
        "AutofillAddressEnabled": False,
        "AutofillCreditCardEnabled": False,
        "PromotionalTabsEnabled": False,
        "DefaultBrowserSettingEnabled": False,
        "URLBlocklist": ["javascript://*"],
    }
)
