"""The shapes of the names raysampler accepts, defined once: ids (runs, data sets, tenants, a tag's key) and site
labels (`raysampler.io/site`, a Kubernetes-style label value). The strings go into pydantic fields and so into the
OpenAPI document; the compiled forms check names in code (grants, settings, shards)."""

from __future__ import annotations

import re

#: An id's body: a letter or digit, then up to 63 letters, digits, `_`, `.` or `-`.
ID = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"
ID_PATTERN = rf"^{ID}$"
#: A site label: 1 to 63 letters, digits, `_`, `.` or `-`, beginning and ending with a letter or digit.
SITE_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$"

ID_RE = re.compile(ID_PATTERN)
SITE_RE = re.compile(SITE_PATTERN)
