"""Plain HTTP GETs of the tests (urllib; errors are urllib's, OSErrors)."""

import json
import urllib.error
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


def get(url, timeout=2.0, context=None):
    """(status, body bytes) of GET url with no proxy; an HTTP error returns its status, a
    network error raises OSError (urllib.error.URLError). context: an ssl.SSLContext for
    https:// URLs (CA, client certificate). What the nodes of a cluster use (nodes.py)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
