"""A stand-in for raw.githubusercontent.com, on 127.0.0.1, for the fresh-runtime stage.

It answers `GET /<org>/<repo>/<ref>/<path>` with the file `<path>` as committed at `<ref>` in a
git repository (`git show <ref>:<path>`), and 404 for anything else: another repository, a
ref the repository lacks, a path not committed there. So a download that names a missing ref
fails here as it fails for a reader; only the host differs.

    python tools/raw_server.py GIT_DIR ORG/REPO PORT_FILE
writes the port it listens on into PORT_FILE, then serves until killed.
"""
import http.server
import subprocess
import sys
import urllib.parse
from pathlib import Path


def main():
    git_dir, org_repo, port_file = sys.argv[1], sys.argv[2].strip("/"), Path(sys.argv[3])

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).lstrip("/")
            prefix = org_repo + "/"
            ref, _, file = path.removeprefix(prefix).partition("/")
            if not path.startswith(prefix) or not ref or not file or ".." in file.split("/"):
                return self.send_error(404)
            # the ref must be a branch or a tag by name, as on the real host
            for kind in ("heads", "tags"):
                resolved = subprocess.run(
                    ["git", "--git-dir", git_dir, "rev-parse", "--verify", "--quiet",
                     f"refs/{kind}/{ref}^{{commit}}"], capture_output=True)
                if resolved.returncode == 0:
                    break
            else:
                return self.send_error(404, f"no ref {ref}")
            commit = resolved.stdout.decode().strip()
            blob = subprocess.run(["git", "--git-dir", git_dir, "show", f"{commit}:{file}"],
                                  capture_output=True)
            if blob.returncode:
                return self.send_error(404, f"no {file} at {ref}")
            self.send_response(200)
            self.send_header("Content-Length", str(len(blob.stdout)))
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            self.wfile.write(blob.stdout)

        def log_message(self, fmt, *args):
            sys.stderr.write(f"raw_server: {self.command} {self.path} -> {fmt % args}\n")

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port_file.write_text(str(httpd.server_address[1]))
    httpd.serve_forever()


if __name__ == "__main__":
    main()
