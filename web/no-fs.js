// The package reads model files with Node's `fs` in `load(path)`; the page passes the model's
// bytes instead, so in the browser `fs` is never called and this empty stand-in replaces it.
export function readFileSync() { throw new Error("no file system in the browser"); }
export function readFile() { throw new Error("no file system in the browser"); }
export function readSync() { throw new Error("no file system in the browser"); }
