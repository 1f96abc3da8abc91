"""Plain HTTP GETs of the tests (urllib; errors are urllib's, OSErrors)."""

import json
import urllib.request


def http_get(url, timeout=2.0):
    """(status, body bytes) of GET url."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.read()


def http_json(url, timeout=2.0):
    """The JSON body of GET url, decoded."""
    return json.loads(http_get(url, timeout)[1])


def http_text(url, timeout=5.0):
    """The body of GET url as text."""
    return http_get(url, timeout)[1].decode()
