#!/usr/bin/env bash
# test_doc_commands.sh - runs the command lines of the docs, so that a doc
# cannot show a command that no longer works as it says.
#
#   tests/test_doc_commands.sh [-v] SCREE_TUNE [REPO]
#
# The commands are those of docs/**/*.md, README.md and python/README.md:
# every line of a fenced block tagged sh, shell, bash or console (blank
# lines and `#` comments aside), and every `$ `-prompted line of any fenced
# block (a transcript: the lines after it are what it printed). A line that
# ends in `\` goes on on the next one. Each runs and must exit 0, unless an
# HTML comment on the line right before the block's opening fence says
# otherwise (it does not show in rendered Markdown):
#
#   <!-- commands: WORD... [setup: SHELL] -->
#
#   N          the command exits N (0..255)
#   gpu        the command needs a GPU. A scree-tune command runs anyway
#              and must exit 3 (no GPU), which checks its command line;
#              any other command is not run.
#   skip(WHY)  the command is not run, for the reason WHY (no parentheses
#              in it): it needs a cluster, docker, pip, the network, a
#              build of its own, or runs the test suite...
#   output     for each `$ ` command, every line shown after it must be a
#              line of what it printed (stdout and stderr), in order; `...`
#              in a shown line stands for any text
#   needs=P,Q  run the block only where the programs P and Q are installed
#   setup: S   run the shell command S first, in the block's sandbox (the
#              rest of the comment), with these functions:
#                user_cache [FILE...]  a cache with one winner (RMSNorm on
#                                      sm_90, compiled from a shipped
#                                      config) as FILE, or as the user cache
#                shipped_text FILE...  three shipped tuned configs as text:
#                                      that one and two more RMSNorm rows,
#                                      rows<=1024 tuned for another kernel
#                                      source (stale)
#                from_repo PATH...     copies of the repository's files or
#                                      directories (globs are the repo's)
#                git_init              the sandbox as a git repository, its
#                                      files committed
#
# N, gpu and skip(WHY) give the commands' outcomes: one word for every
# command of the block, or one word per command, in order (a block whose
# command count differs from the words fails). Without any, every command
# must exit 0, so a new command that cannot run here fails until it is
# marked. Such an unmarked command runs only if it is a scree-tune command
# (or an `export`) that names no absolute path, so that nothing outside the
# sandbox is touched; any other fails unrun, to be marked: `0` if it may
# run here, else gpu or skip(WHY).
#
# The commands of a block run in order, each in its own bash (stdin
# /dev/null, a timeout of SCREE_DOC_TIMEOUT seconds, default 60), in one
# sandbox: a fresh temporary directory that is the working directory and
# HOME, with SCREE_CACHE_DIR=$HOME/.cache/scree (the default cache path),
# CUDA_VISIBLE_DEVICES empty (so a GPU machine behaves like one without),
# LC_ALL=C, and `scree-tune` on PATH and `build/scree-tune` both the
# program under test. No other variable is set but the loader's, CUDA's
# (LD_LIBRARY_PATH, CUDA_HOME, CUDA_PATH, SCREE_NVRTC_LIBRARY) and the
# sanitizers' options. What a command exports, and the directory it changes
# to, carry over to the block's later commands. The repository is read
# (the docs, from_repo) and never written.
#
# -v lists every command with its outcome. The CPU test test_doc_commands
# runs this; it takes a few seconds.
set -u

verbose=0
if [ "${1:-}" = -v ]; then
  verbose=1
  shift
fi
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 [-v] SCREE_TUNE [REPO]" >&2
  exit 2
fi
bin=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
root=$(cd "${2:-$(dirname "$0")/..}" && pwd)
[ -x "$bin" ] || { echo "$0: $1 is not a program" >&2; exit 2; }
timeout_s=${SCREE_DOC_TIMEOUT:-60}
t0=$(date +%s%N)

work=$(mktemp -d "${TMPDIR:-/tmp}/scree-doc-commands.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/fixtures"
ln -s "$bin" "$work/bin/scree-tune"

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# ---- reading the docs ------------------------------------------------------

# Commands: C_TEXT (the command, continuation lines joined by newlines),
# C_WHERE (doc:line), C_WANT (a number, gpu or skip:WHY), C_SHOWN (the
# transcript's lines after it), C_BLOCK. Blocks: B_WHERE, B_FIRST, B_N,
# B_OUTPUT, B_NEEDS, B_SETUP.
C_TEXT=() C_WHERE=() C_WANT=() C_MARKED=() C_SHOWN=() C_BLOCK=()
B_WHERE=() B_FIRST=() B_N=() B_OUTPUT=() B_NEEDS=() B_SETUP=()

# parse_marker SPEC WHERE: sets m_want (array), m_output, m_needs, m_setup.
parse_marker() {
  local spec=$1 where=$2 word
  m_want=() m_output=0 m_needs="" m_setup=""
  while :; do
    spec=${spec#"${spec%%[![:space:]]*}"}
    [ -n "$spec" ] || break
    if [[ $spec =~ ^setup:(.*)$ ]]; then
      m_setup=${BASH_REMATCH[1]}
      [[ $m_setup =~ [^[:space:]] ]] || { fail "$where: setup: is empty"; return 1; }
      break
    fi
    if [[ $spec =~ ^skip[[:space:]]*\(([^\)]*)\)(.*)$ ]]; then
      word=${BASH_REMATCH[1]}
      spec=${BASH_REMATCH[2]}
      [[ $word =~ [^[:space:]] ]] || { fail "$where: skip() needs a reason"; return 1; }
      m_want+=("skip:$word")
      continue
    fi
    word=${spec%%[[:space:]]*}
    spec=${spec:${#word}}
    case $word in
      gpu) m_want+=(gpu) ;;
      output) m_output=1 ;;
      needs=?*) m_needs=${word#needs=} ;;
      *)
        if [[ $word =~ ^[0-9]+$ ]] && [ "$word" -le 255 ]; then
          m_want+=("$word")
        else
          fail "$where: '$word' is not a word of a commands comment (N, gpu, skip(WHY), output, needs=P, setup: S)"
          return 1
        fi
        ;;
    esac
  done
  return 0
}

# drop_commands FIRST: forgets the commands from FIRST on (a block in error).
drop_commands() {
  local i n=${#C_TEXT[@]}
  for ((i = $1; i < n; i++)); do
    unset 'C_TEXT[i]' 'C_WHERE[i]' 'C_SHOWN[i]' 'C_BLOCK[i]'
  done
}

# add_block DOC LINE LANG MARKER MARKER_WHERE: the body is in `body` (lines,
# fence indentation removed), the block's first body line is LINE+1.
add_block() {
  local doc=$1 open=$2 lang=$3 marker=$4 mwhere=$5
  local transcript=0 is_cmd=0 i line n=0 cur=-1 cont=0 first=${#C_TEXT[@]}
  for line in "${body[@]}"; do
    [[ $line == '$ '* ]] && transcript=1
  done
  case $lang in sh | shell | bash | console) is_cmd=1 ;; esac
  [ $transcript = 1 ] && is_cmd=1
  if [ $is_cmd = 0 ]; then
    [ -z "$mwhere" ] || fail "$mwhere: a commands comment before a block with no commands (tag it sh, or prompt its commands with \$)"
    return
  fi
  for i in "${!body[@]}"; do
    line=${body[$i]}
    if [ $cont = 1 ]; then
      C_TEXT[cur]+=$'\n'"$line"
      [[ $line == *\\ ]] || cont=0
      continue
    fi
    if [ $transcript = 1 ]; then
      if [[ $line == '$ '* ]]; then
        line=${line#'$ '}
      else
        ((cur >= first)) && C_SHOWN[cur]+="$line"$'\n'
        continue
      fi
    else
      [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
    fi
    cur=${#C_TEXT[@]}
    C_TEXT+=("$line")
    C_WHERE+=("$doc:$((open + 1 + i))")
    C_SHOWN+=("")
    C_BLOCK+=(${#B_WHERE[@]})
    n=$((n + 1))
    [[ $line == *\\ ]] && cont=1
  done
  if [ $n = 0 ]; then
    [ -z "$mwhere" ] || fail "$mwhere: a commands comment before a block with no commands"
    return
  fi
  m_want=() m_output=0 m_needs="" m_setup=""
  if [ -n "$mwhere" ] && ! parse_marker "$marker" "$mwhere"; then
    drop_commands "$first"
    return
  fi
  if [ ${#m_want[@]} -gt 1 ] && [ ${#m_want[@]} != $n ]; then
    fail "$mwhere: the block has $n command(s), its commands comment gives ${#m_want[@]} outcomes (give one, or one per command)"
    drop_commands "$first"
    return
  fi
  for ((i = 0; i < n; i++)); do
    C_MARKED+=($((${#m_want[@]} > 0)))
    if [ ${#m_want[@]} = 0 ]; then
      C_WANT+=(0)
    elif [ ${#m_want[@]} = 1 ]; then
      C_WANT+=("${m_want[0]}")
    else
      C_WANT+=("${m_want[$i]}")
    fi
  done
  B_WHERE+=("$doc:$open")
  B_FIRST+=("$first")
  B_N+=("$n")
  B_OUTPUT+=("$m_output")
  B_NEEDS+=("$m_needs")
  B_SETUP+=("$m_setup")
}

read_doc() {
  local doc=$1 ln=0 line fence="" indent=0 lang="" open=0
  local marker="" mline=0 mwhere="" bmarker="" bmwhere=""
  body=()
  while IFS= read -r line || [ -n "$line" ]; do
    ln=$((ln + 1))
    line=${line%$'\r'}
    if [ -n "$fence" ]; then
      if [[ $line =~ ^[[:space:]]*(\`{3,}|~{3,})[[:space:]]*$ ]] &&
        [ "${BASH_REMATCH[1]:0:1}" = "${fence:0:1}" ] && [ ${#BASH_REMATCH[1]} -ge ${#fence} ]; then
        add_block "$doc" "$open" "$lang" "$bmarker" "$bmwhere"
        fence="" body=()
      else
        # Up to the fence's indentation is the list item's, not the code's.
        local k=0
        while ((k < indent)) && [ "${line:0:1}" = " " ]; do
          line=${line:1}
          k=$((k + 1))
        done
        body+=("$line")
      fi
      continue
    fi
    if [[ $line =~ ^[[:space:]]*\<!--[[:space:]]*commands[[:space:]]*:(.*)--\>[[:space:]]*$ ]]; then
      [ -z "$mwhere" ] || fail "$mwhere: the commands comment must be on the line right before a \`\`\` fence"
      marker=${BASH_REMATCH[1]} mline=$ln mwhere="$doc:$ln"
      continue
    fi
    if [[ $line =~ ^[[:space:]]*\<!--[[:space:]]*commands? ]]; then
      fail "$doc:$ln: a commands comment must read <!-- commands: ... --> on one line"
      continue
    fi
    if [[ $line =~ ^([[:space:]]*)(\`{3,}|~{3,})[[:space:]]*([^[:space:]\`]*) ]]; then
      indent=${#BASH_REMATCH[1]} fence=${BASH_REMATCH[2]} lang=${BASH_REMATCH[3]} open=$ln
      bmarker="" bmwhere=""
      if [ -n "$mwhere" ] && [ $mline = $((ln - 1)) ]; then
        bmarker=$marker bmwhere=$mwhere
        mwhere=""
      fi
      body=()
      continue
    fi
    if [ -n "$mwhere" ]; then
      fail "$mwhere: the commands comment must be on the line right before a \`\`\` fence"
      mwhere=""
    fi
  done <"$root/$doc"
  [ -z "$fence" ] || fail "$doc:$open: the code block is not closed"
  [ -z "$mwhere" ] || fail "$mwhere: the commands comment must be on the line right before a \`\`\` fence"
}

docs=()
while IFS= read -r d; do docs+=("$d"); done < <(cd "$root" && find docs -name '*.md' | LC_ALL=C sort)
docs+=(README.md python/README.md)
for d in "${docs[@]}"; do
  read_doc "$d"
done

# ---- running them -------------------------------------------------------------

# The helpers a block's setup may call.
{
  printf 'root=%q\nbin=%q\nfix=%q\n' "$root" "$bin" "$work/fixtures"
  cat <<'EOF'
fixture() {
  [ -f "$fix/tune.db" ] && return 0
  local h
  h=$("$bin" doctor --json | grep -o '"rmsnorm": "[0-9a-f]\{64\}"' | head -1 | grep -o '[0-9a-f]\{64\}')
  [ -n "$h" ] || { echo "fixture: no rmsnorm source hash in scree-tune doctor --json" >&2; return 1; }
  local k="rmsnorm rows<=16384,cols=4096 x=bf16,w=bf16,y=bf16 0 sm_90 NVIDIA_H100_80GB_HBM3"
  printf '%s\n' "# shipped tuned configs (tests/test_doc_commands.sh)" \
    "$k tpr=128,rows=1,vec=8,cache=4 95.232 $h" >"$fix/one.txt"
  # The same and two more, one of them for another kernel source (stale).
  { cat "$fix/one.txt"
    printf '%s\n' "${k/16384/1024} tpr=256,rows=1,vec=8,cache=2 20.125 ${h//?/0}" \
      "${k/16384/2048} tpr=128,rows=1,vec=8,cache=4 24.750 $h"
  } >"$fix/shipped.txt"
  SCREE_TUNED_CONFIGS="$fix/one.txt" "$bin" prewarm --from-shipped --arch sm_90 \
    --cache "$fix/tune.db.new" -q || return 1
  [ ! -e "$fix/tune.db.new-wal" ] || { echo "fixture: the cache kept its WAL file" >&2; return 1; }
  mv "$fix/tune.db.new" "$fix/tune.db"
}
user_cache() {
  fixture || return 1
  [ $# -gt 0 ] || set -- "$SCREE_CACHE_DIR/tune.db"
  local f
  for f; do
    mkdir -p -m 700 "$(dirname "$f")" && cp "$fix/tune.db" "$f" || return 1
  done
}
shipped_text() {
  fixture || return 1
  local f
  for f; do cp "$fix/shipped.txt" "$f" || return 1; done
}
from_repo() {
  local p here=$PWD
  for p; do
    (cd "$root" && for f in $p; do
      [ -e "$f" ] || { echo "from_repo: $p: not in the repository" >&2; exit 1; }
      mkdir -p "$here/$(dirname "$f")" && cp -R "$f" "$here/$(dirname "$f")/" || exit 1
    done) || return 1
  done
}
git_init() {
  git init -q . && printf 'build\n.cache\n' >.git/info/exclude && git add -A &&
    git -c user.name=docs -c user.email=docs@localhost commit -qm fixture
}
EOF
} >"$work/helpers.sh"

# Runs one command file in a state directory (env, pwd) and saves its state.
cat >"$work/run1.sh" <<'EOF'
state=$1 cmd=$2
[ -f "$state/env" ] && . "$state/env"
cd "$(cat "$state/pwd")" || exit 125
[ -n "${3:-}" ] && . "$3"
. "$cmd"
rc=$?
export -p | grep -v '^declare -[a-zA-Z]*r' >"$state/env"
pwd >"$state/pwd"
exit $rc
EOF

base_env=(PATH="$work/bin:$PATH" LC_ALL=C CUDA_VISIBLE_DEVICES=)
for v in LD_LIBRARY_PATH CUDA_HOME CUDA_PATH SCREE_NVRTC_LIBRARY ASAN_OPTIONS UBSAN_OPTIONS \
  LSAN_OPTIONS TSAN_OPTIONS MSAN_OPTIONS; do
  [ -n "${!v+x}" ] && base_env+=("$v=${!v}")
done

# run_cmd BLOCKDIR TEXT OUT [HELPERS]: the exit status of TEXT in the sandbox.
run_cmd() {
  local dir=$1 home=$1/home
  printf '%s\n' "$2" >"$dir/cmd"
  (cd "$home" && env -i "${base_env[@]}" HOME="$home" SCREE_CACHE_DIR="$home/.cache/scree" \
    TMPDIR="$dir/tmp" timeout -k 5 "$timeout_s" bash "$work/run1.sh" "$dir/state" "$dir/cmd" \
    ${4:+"$4"} </dev/null >"$3" 2>&1)
}

# Whether a command (after VAR=value words) starts with scree-tune.
is_scree_tune() {
  [[ $1 =~ ^([A-Za-z_][A-Za-z0-9_]*=[^[:space:]]*[[:space:]]+)*(build/)?scree-tune([[:space:]]|$) ]]
}

# Whether an unmarked command may run: scree-tune or export, no absolute path.
may_run_unmarked() {
  [[ $1 =~ ^([A-Za-z_][A-Za-z0-9_]*=[^[:space:]]*[[:space:]]+)*(build/scree-tune|scree-tune|export)([[:space:]]|$) ]] &&
    ! [[ ${1//\/dev\/null/} =~ (^|[[:space:]=:\"\'])/ ]]
}

# check_output SHOWN OUT: every non-blank shown line is a line of OUT, in order.
check_output() {
  local shown=$1 out=$2 s pat j=0 got=() g found
  mapfile -t got <"$out"
  while IFS= read -r s; do
    s=${s%"${s##*[![:space:]]}"}
    [ -n "$s" ] || continue
    pat=${s//.../$'\x01'}
    pat=$(printf '%s' "$pat" | sed 's/[][\\*?]/\\&/g')
    pat=${pat//$'\x01'/*}
    found=0
    while [ $j -lt ${#got[@]} ]; do
      g=${got[$j]%"${got[$j]##*[![:space:]]}"}
      j=$((j + 1))
      # shellcheck disable=SC2053 # the pattern is a glob on purpose
      if [[ $g == $pat ]]; then
        found=1
        break
      fi
    done
    if [ $found = 0 ]; then
      echo "  this shown line is not in the output (or not in order):"
      echo "    $s"
      return 1
    fi
  done <<<"$shown"
  return 0
}

say() { [ $verbose = 1 ] && printf '%-5s %-30s %-9s %s\n' "$1" "$2" "$3" "${4%%$'\n'*}"; }

n_run=0 n_gpu_run=0 n_gpu_not=0 n_skip=0 n_needs=0 n_out=0
skips=()
for b in "${!B_WHERE[@]}"; do
  first=${B_FIRST[$b]} n=${B_N[$b]}
  # Whether anything of the block runs here.
  runs=0
  for ((c = first; c < first + n; c++)); do
    case ${C_WANT[$c]} in
      skip:*) ;;
      gpu) is_scree_tune "${C_TEXT[$c]}" && runs=1 ;;
      *) runs=1 ;;
    esac
  done
  missing=""
  for p in ${B_NEEDS[$b]//,/ }; do
    command -v "$p" >/dev/null 2>&1 || missing+=" $p"
  done
  if [ $runs = 1 ] && [ -n "$missing" ]; then
    echo "note: ${B_WHERE[$b]}: not run, needs$missing"
    n_needs=$((n_needs + n))
    continue
  fi
  dir=$work/b$b
  if [ $runs = 1 ]; then
    mkdir -m 700 "$dir" "$dir/home" && mkdir "$dir/home/build" "$dir/state" "$dir/tmp"
    ln -s "$bin" "$dir/home/build/scree-tune"
    echo "$dir/home" >"$dir/state/pwd"
    if [ -n "${B_SETUP[$b]}" ] && ! run_cmd "$dir" "${B_SETUP[$b]}" "$dir/setup.out" "$work/helpers.sh"; then
      fail "${B_WHERE[$b]}: the setup failed: ${B_SETUP[$b]}"
      sed 's/^/  | /' "$dir/setup.out" | tail -20
      continue
    fi
  fi
  for ((c = first; c < first + n; c++)); do
    text=${C_TEXT[$c]} want=${C_WANT[$c]} where=${C_WHERE[$c]}
    case $want in
      skip:*)
        n_skip=$((n_skip + 1))
        skips+=("$where: ${want#skip:}")
        say skip "$where" "" "$text"
        continue
        ;;
      gpu)
        if ! is_scree_tune "$text"; then
          n_gpu_not=$((n_gpu_not + 1))
          say gpu "$where" "not run" "$text"
          continue
        fi
        n_gpu_run=$((n_gpu_run + 1))
        want=3
        ;;
    esac
    if [ "${C_MARKED[$c]}" = 0 ] && ! may_run_unmarked "$text"; then
      fail "$where: not run: an unmarked command runs only if it is a scree-tune command (or an export) naming no absolute path; give its outcome in a <!-- commands: ... --> comment (N, gpu or skip(WHY)):"
      printf '%s\n' "$text" | sed 's/^/  $ /'
      continue
    fi
    n_run=$((n_run + 1))
    out=$dir/out$c
    run_cmd "$dir" "$text" "$out"
    rc=$?
    if [ "$rc" != "$want" ]; then
      if [ $rc = 124 ] || [ $rc = 137 ]; then
        fail "$where: timed out after $timeout_s s (the doc says it exits $want):"
      else
        why=""
        [ "${C_WANT[$c]}" = gpu ] && why=" (a GPU command, here without one)"
        fail "$where: exited $rc, the doc says $want$why:"
      fi
      printf '%s\n' "$text" | sed 's/^/  $ /'
      sed 's/^/  | /' "$out" | tail -20
      continue
    fi
    if [ "${B_OUTPUT[$b]}" = 1 ] && [ -n "${C_SHOWN[$c]//[[:space:]]/}" ]; then
      n_out=$((n_out + 1))
      if ! why=$(check_output "${C_SHOWN[$c]}" "$out"); then
        fail "$where: the output differs from the doc's:"
        printf '%s\n' "$text" | sed 's/^/  $ /'
        sed 's/^/  | /' "$out" | tail -20
        printf '%s\n' "$why"
        continue
      fi
    fi
    say ok "$where" "exit $rc" "$text"
  done
  rm -rf "$dir"
done

total=${#C_TEXT[@]}
ms=$((($(date +%s%N) - t0) / 1000000))
if [ $verbose = 1 ] && [ ${#skips[@]} -gt 0 ]; then
  echo "skipped:"
  printf '  %s\n' "${skips[@]}"
fi
echo "doc commands: $total in ${#B_WHERE[@]} blocks of ${#docs[@]} files: $n_run run" \
  "($n_gpu_run of them GPU commands, checked to exit 3 here; $n_out outputs checked)," \
  "$n_gpu_not GPU commands not run, $n_skip skipped, $n_needs not run for a missing program;" \
  "$((ms / 1000)).$(printf '%03d' $((ms % 1000))) s"
if [ $n_run -lt 20 ]; then
  fail "only $n_run commands ran: the docs' blocks were not found"
fi
if [ $failures -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
