"""schemathesis hooks of tests/openapi.rs, loaded through SCHEMATHESIS_HOOKS.

This machine's CPython 3.11.7 has gh-106905: ast.parse can fail with a spurious
SystemError, "AST constructor recursion depth mismatch". hypothesis parses a module's
source only to describe a lambda in a strategy's repr, and already describes a lambda
whose source it cannot parse as "lambda: <unknown>". This hook does the same when the
parse fails with that SystemError, so that the interpreter's bug is not reported as a
failure of warren's API. (CI failed on it on 2026-12-08 with hypothesis 6.170.27, and on
2026-12-07 with 6.170.29.)
"""

from hypothesis.internal import lambda_sources

_describe = lambda_sources._lambda_description


def _lambda_description(f):
    try:
        return _describe(f)
    except SystemError:
        return "lambda: <unknown>"


lambda_sources._lambda_description = _lambda_description
