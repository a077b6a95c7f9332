"""A stand-in upstream that parses multipart/form-data with werkzeug.

keygate's differential tests post the exact bytes keygate forwarded to this
server and compare what werkzeug reads with what keygate checked. It listens
on 127.0.0.1 on a free port, prints the port on its first line of output,
and answers every request with JSON: {"fields": [[name, value, kind], ...]}
or {"error": "..."} when werkzeug refuses the body. Run it with Debian's
python3 (/usr/bin/python3) and python3-werkzeug.
"""
import io
import json
import logging

from werkzeug.formparser import parse_form_data
from werkzeug.serving import make_server


def app(environ, start_response):
    # Read the whole body before werkzeug sees it. werkzeug leaves the body
    # unread when it does not take the media type for a form (it compares
    # "multipart/form-data" case-sensitively), and this server then closes
    # the connection with most of a large upload unsent: the client's write
    # fails with a broken pipe instead of getting the answer.
    n = int(environ.get("CONTENT_LENGTH") or 0)
    environ["wsgi.input"] = io.BytesIO(environ["wsgi.input"].read(n))
    try:
        _, form, files = parse_form_data(environ, silent=False)
        fields = [[k, v, "field"] for k, v in form.items(multi=True)]
        for k, f in files.items(multi=True):
            fields.append([k, f.read().decode("latin-1"), "file"])
        out = {"fields": fields}
    except Exception as e:  # werkzeug refused the body
        out = {"error": "%s: %s" % (type(e).__name__, e)}
    body = json.dumps(out).encode()
    start_response("200 OK", [("Content-Type", "application/json"),
                              ("Content-Length", str(len(body)))])
    return [body]


def main():
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = make_server("127.0.0.1", 0, app, threaded=True)
    print(srv.server_port, flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
