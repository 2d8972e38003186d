"""What runs inside the sandbox around a step's code: read ``{"code", "input"}`` as JSON on stdin,
define the code, call its ``main(input)``, write what it returns as JSON on stdout.

The code's own output (``print``, ``console.log``) goes to stderr, which the worker keeps the
tail of as the step's log, so stdout carries the result alone. The exit status says how it
ended; the worker turns it into a step error code (see ``agentflow.integrations.sandbox.process``).
"""

from __future__ import annotations

EXIT_FAILED = 1
"""The code raised (or threw): the traceback is on stderr."""
EXIT_NOT_JSON = 70
"""``main`` returned something JSON cannot carry (a set, NaN, a function, undefined)."""
EXIT_NO_MAIN = 71
"""The code does not compile, or defines no ``main``."""
EXIT_MEMORY = 72
"""Python raised ``MemoryError``: the data memory limit was reached."""
EXIT_SETUP_FAILED = 125
"""The launcher could not set the sandbox up (its status pipe says why)."""
EXIT_CANNOT_RUN = 127
"""The launcher could not execute the interpreter (its status pipe says why)."""

PYTHON = f"""
import json, os, sys, traceback

def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass

def _end(status, text):
    _flush()
    os.write(2, text.encode("utf-8", "replace"))
    os._exit(status)

try:
    _result = os.dup(1)
    os.dup2(2, 1)  # print() writes to the log; the result has its own descriptor
    _doc = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    try:
        _code = compile(_doc["code"], "<code>", "exec")
    except (SyntaxError, ValueError) as _exc:
        _end({EXIT_NO_MAIN}, "".join(traceback.format_exception_only(type(_exc), _exc)))
    _scope = {{"__name__": "__code__", "__builtins__": __builtins__}}
    del _doc["code"]
    exec(_code, _scope)
    _main = _scope.get("main")
    if not callable(_main):
        _end({EXIT_NO_MAIN}, "the code defines no function main(input)\\n")
    _value = _main(_doc.pop("input"))
    if hasattr(_value, "__await__"):
        import asyncio
        _value = asyncio.run(_value)
    try:  # a lone surrogate cannot be encoded: UnicodeEncodeError is a ValueError
        _out = json.dumps(_value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as _exc:
        _end({EXIT_NOT_JSON}, f"main returned {{type(_value).__name__}}, which is not JSON: {{_exc}}\\n")
    _flush()
    while _out:
        _out = _out[os.write(_result, _out):]
    os._exit(0)
except MemoryError:
    _end({EXIT_MEMORY}, "MemoryError: the code used more memory than its limit\\n")
except SystemExit as _exc:
    _status = _exc.code if isinstance(_exc.code, int) else {EXIT_FAILED}
    _end(_status, f"the code called exit({{_exc.code!r}})\\n")
except BaseException:
    _end({EXIT_FAILED}, traceback.format_exc())
"""

JAVASCRIPT = f"""
'use strict';
const fs = require('fs');
const log = new console.Console(process.stderr, process.stderr);
Object.defineProperty(globalThis, 'console', {{ value: log, writable: true, configurable: true }});
function end(status, text) {{
  try {{ fs.writeSync(2, text + '\\n'); }} finally {{ process.exit(status); }}
}}
const doc = JSON.parse(fs.readFileSync(0, 'utf8'));
let main;
try {{
  const tail = '\\n;return typeof main === "function" ? main : undefined;';
  const define = new Function('require', doc.code + tail);
  main = define(require);
}} catch (e) {{
  end(e instanceof SyntaxError ? {EXIT_NO_MAIN} : {EXIT_FAILED}, String((e && e.stack) || e));
}}
if (typeof main !== 'function') end({EXIT_NO_MAIN}, 'the code defines no function main(input)');
Promise.resolve().then(() => main(doc.input)).then((value) => {{
  let text;
  try {{
    text = JSON.stringify(value);
  }} catch (e) {{
    end({EXIT_NOT_JSON}, 'main returned a value that is not JSON: ' + e.message);
  }}
  if (text === undefined) end({EXIT_NOT_JSON}, 'main returned ' + typeof value + ', which is not JSON');
  process.stdout.write(text, () => process.exit(0));
}}, (e) => end({EXIT_FAILED}, String((e && e.stack) || e)));
"""
