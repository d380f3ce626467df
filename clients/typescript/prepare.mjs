// Builds dist/ wherever npm runs `prepare` in this folder: when an app
// installs the package from its folder (`npm install <path>`, linked, or
// packed from here with `--install-links`), and on `npm ci`, `npm install`
// and `npm pack` here. npm gives a folder dependency none of its
// devDependencies, so a folder without the compiler installs it first, at
// the versions package-lock.json pins.

import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const tsc = join(here, "node_modules", "typescript", "bin", "tsc");

function run(command, args, shell = false) {
  const result = spawnSync(command, args, { cwd: here, stdio: "inherit", shell });
  if (result.error) throw result.error;
  if (result.status !== 0) process.exit(result.status ?? 1);
}

if (!existsSync(tsc)) {
  // npm hands its scripts the installing command's settings (npm_config_*):
  // the flags here undo those that would leave out the compiler (`--omit=dev`,
  // NODE_ENV=production) or install elsewhere (`--global`).
  const args = ["ci", "--include=dev", "--no-global", "--ignore-scripts", "--prefer-offline", "--no-audit", "--no-fund"];
  const npm = process.env.npm_execpath;
  if (npm && basename(npm) === "npm-cli.js") {
    run(process.execPath, [npm, ...args]);
  } else {
    run("npm", args, process.platform === "win32");
  }
}
run(process.execPath, [tsc, "-p", "tsconfig.json"]);
