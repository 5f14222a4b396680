"""Command lines are judged through a real shell grammar: proven, unproven, or refused."""

import os
import subprocess
from pathlib import Path

import pytest

from core_agent.contracts.settings import DEFAULT_ALLOWED_COMMANDS
from providers.sandbox.commands import CommandGuard
from providers.sandbox.paths import PathGuard
from providers.sandbox.program_paths import default_search_path, system_search_path
from providers.sandbox.program_profiles import PROFILES, judge_options
from providers.shell.tree_sitter_parser import TreeSitterShellParser

PARSER = TreeSitterShellParser()


def argvs(command: str) -> list[tuple[str, ...]]:
    return [c.argv for c in PARSER.parse(command).commands]


def test_every_program_in_a_compound_line_is_found() -> None:
    found = argvs(
        "ls -la && echo $(cat /etc/passwd) | grep root; bash -c 'rm -rf /' || env FOO=1 curl x `id`"
    )
    programs = {argv[0] for argv in found}
    assert programs == {"ls", "echo", "cat", "grep", "bash", "rm", "env", "curl", "id"}


@pytest.mark.parametrize(
    ("command", "inner"),
    [
        ("sh -c 'git push'", ("git", "push")),
        ("env -i PATH=/bin git push", ("git", "push")),
        ("timeout 5 nice -n 3 git push", ("git", "push")),
        ("xargs -n 1 rm < list", ("rm",)),
        ("find . -name '*.tmp' -exec rm -f {} \\;", ("rm", "-f")),
        ("sudo -u root git push", ("git", "push")),
        ("eval 'git push'", ("git", "push")),
        ("(cd /tmp && git push)", ("git", "push")),
        ("for f in a b; do git push; done", ("git", "push")),
        ("cat <(git push)", ("git", "push")),
        ("X=$(git push) ls", ("git", "push")),
        ("cat <<< $(git push)", ("git", "push")),
        ("echo ${x[$(git push)]}", ("git", "push")),
        ("exec -a ls git push", ("git", "push")),
        ("env -S'git push' ls", ("git", "push", "ls")),
        ("((x=$(git push)))", ("git", "push")),
    ],
)
def test_every_place_a_program_hides_is_searched(command: str, inner: tuple[str, ...]) -> None:
    assert inner in argvs(command)


@pytest.mark.parametrize(
    ("command", "construct"),
    [
        ("X=$(touch p) ls", "variable set for the command"),
        ("cat <<< $(touch p)", "command substitution"),
        ("echo $((x))", "arithmetic expansion"),
        ("BASH_ENV=evil.sh bash -c ls", "variable set for the command"),
        ("GIT_CONFIG_COUNT=1 git status", "variable set for the command"),
        ("cat >> $HOME/.bashrc", "variable expansion"),
        ("ls ~", "tilde expansion"),
        ("echo a=~/x", "tilde expansion"),
        ("cat {a,b}", "brace expansion"),
        ("cat $'\\x2fetc/passwd'", "ANSI-C quoting"),
        ('echo $"x"', "locale quoting"),
        ("cat /proc/$PPID/environ", "variable expansion"),
        ("f() { ls; }; f", "function definition"),
        ("ls &", "background job"),
        ("export A=1", "declaration"),
        ("cat <<EOF\n`id`\nEOF\n", "here-document that expands"),
        ('bash -c "$SCRIPT"', "only known at run time"),
        ('eval "$X"', "runs code the line does not show"),
        ("source ./script.sh", "runs code the line does not show"),
        # Where the grammar and bash part ways (each hid a command from the judge).
        ("echo hi > notes.txt\n\\rm -rf src", "a newline inside a word"),
        ("ls\n\\touch pwned", "a newline inside a word"),
        ("echo hi; echo \r# ; rm -rf src", "a control character"),
        ("ls 2>/dev/null x", "words after a redirection's target"),
        ("cat \\ README.md", "text the grammar skipped"),
        ("echo a\\\tb", "text the grammar skipped"),
        ('printf "A"\\x"B"', "one word the grammar reads as two"),
        ("ls -la \\\n  && touch x", "line continuation"),
    ],
)
def test_what_cannot_be_read_statically_is_reported(command: str, construct: str) -> None:
    parsed = PARSER.parse(command)
    assert any(construct in reason for reason in parsed.unproven), parsed.unproven


@pytest.mark.parametrize("command", ["echo 'unterminated", "ls &&", "if then fi"])
def test_what_cannot_be_parsed_is_an_error(command: str) -> None:
    assert PARSER.parse(command).error


def test_a_command_after_a_here_document_is_found() -> None:
    # The grammar hangs the rest of the line on the here-document.
    for line in ("cat <<EOF | rm -rf src\nhello\nEOF\n", "cat <<EOF && rm -rf src\nhi\nEOF"):
        assert ("rm", "-rf", "src") in argvs(line)


def test_a_tilde_inside_a_word_is_not_an_expansion() -> None:
    assert not PARSER.parse("git diff HEAD~1 -- src/").unproven


def test_a_quoted_here_document_and_literal_words_are_plain() -> None:
    parsed = PARSER.parse("cat <<'EOF'\n$x `id`\nEOF\n")
    assert not parsed.unproven and parsed.ok


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / ".git").mkdir()
    return root


@pytest.fixture
def guard(workspace: Path, tmp_path: Path) -> CommandGuard:
    paths = PathGuard([workspace], [tmp_path / "data"], [tmp_path / "data"])
    return CommandGuard(PARSER, DEFAULT_ALLOWED_COMMANDS, paths, default_search_path([workspace]))


@pytest.mark.parametrize(
    "command",
    [
        "git status",
        "git status --short | grep M",
        "ls -la && git log -n 3 --oneline",
        "git -C src log --format='%H %s' -- src/app.py",
        "cat src/app.py | head -n 20 | wc -l",
        "grep -rn TODO src/",
        "sort -k2,2 -t, data.csv | uniq -c",
        "ls src/*.py",
        "git branch --list 'feat*'",
        "date +%Y-%m-%d",
        "echo https://x.org/a/b",
        "cat <<'EOF'\nliteral $x\nEOF\n",
    ],
)
def test_allowed_read_only_lines_are_proven(guard: CommandGuard, command: str) -> None:
    verdict = guard.assess(command)
    assert verdict.allowed and not verdict.writes, verdict


def test_a_redirection_into_the_workspace_is_a_proven_write(guard: CommandGuard) -> None:
    verdict = guard.assess("echo hi > out.txt 2>&1")
    assert verdict.allowed and verdict.writes


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        ("git status && rm -rf x", "'rm -rf x' is not an allowed command"),
        ("git status; curl http://x", "'curl http://x' is not an allowed command"),
        ("ls | sh", "'sh' is not an allowed command"),
        ("echo $(id)", "'id' is not an allowed command"),
        ("bash -c 'git status; ls'", "'bash -c git status; ls' is not an allowed command"),
        ("env git status", "'env git status' is not an allowed command"),
        ("git -c core.pager=sh status", "git -c writes files or runs programs"),
        ("git statusx", "not an allowed command"),
        ("$CMD status", "only known at run time"),
        ("echo 'oops", "cannot be parsed"),
        ("sort -o/tmp/x data", "sort -o writes files or runs programs"),
        ("sort -rno/tmp/x data", "sort -o writes files or runs programs"),
        ("sort --out=x data", "sort --output writes files or runs programs"),
        ("sort --compress-program=sh data", "--compress-program"),
        ("sort -T /tmp data", "sort -T"),
        ("git diff --output=/abs", "git --output writes files or runs programs"),
        ("git log --outp=x", "git --output"),
        ("git log --ext-diff", "--ext-diff"),
        ("git branch -D main", "git -D"),
        ("git branch newbranch", "changes the repository"),
        ("uniq input.txt output.txt", "is an output file"),
        ("date -s '2020-01-01'", "date -s"),
        ("date 010100002030", "sets the system clock"),
        ("file -C -m magic", "file -C"),
        ("cat /etc/passwd", "outside the workspace roots"),
        ("cat ../../secret", "outside the workspace roots"),
        ("grep -r root /etc", "outside the workspace roots"),
        ("grep -f /etc/shadow x", "outside the workspace roots"),
        ("git -C /etc log", "outside the workspace roots"),
        ("cat src/../../x", "outside the workspace roots"),
        ("cat /*", "outside the workspace roots"),
        ("cat < /etc/passwd", "outside the workspace roots"),
        ("python3 -m pytest", "not an allowed command"),
        ("X=1 ls", "variable set for the command"),
        # What an adversarial review of the judge found, each a way past it before:
        ("git --shallow-file log -c core.fsmonitor=x status", "unknown git option"),
        ("git --bogus status", "unknown git option"),
        ("sort -S1 --\\\ncompress-program=sh README.md > out.txt", "line continuation"),
        ("cat .\\\n./.\\\n./etc/hostname", "line continuation"),
        ("cd -P /etc && cat hostname", "changes the directory"),
        ("cd src && cat ../../x", "changes the directory"),
        ("grep --color root /etc/passwd", "outside the workspace roots"),
        ("diff --unified /etc/passwd README.md", "outside the workspace roots"),
        ("git diff --no-index --color /etc/passwd README.md", "outside the workspace roots"),
        ("git status --ignored /etc", "outside the workspace roots"),
        ("du --time /root", "outside the workspace roots"),
        ("uniq --group README.md out.txt", "is an output file"),
        ("git branch --color evil", "changes the repository"),
        ("file -z notes.gz", "file -z"),
        # Files named inside another file are read without the judge seeing their names.
        ("echo -n /etc/passwd > list && sort --files0-from=list", "sort --files0-from reads"),
        ("sort --files0 list", "sort --files0-from reads"),
        ("wc -l --files0-from=list", "wc --files0-from reads"),
        ("du --files0-from list", "du --files0-from reads"),
        ("file -f list", "file -f reads"),
        ("file -bf list", "file -f reads"),
        ("file --files-from=list", "file --files-from reads"),
    ],
)
def test_anything_not_proven_needs_a_human(
    guard: CommandGuard, command: str, fragment: str
) -> None:
    verdict = guard.assess(command)
    assert verdict.refusal is None
    assert not verdict.allowed
    assert any(fragment in reason for reason in verdict.unproven), verdict.unproven


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        ("", "empty"),
        ("echo hi > /etc/cron.d/x", "outside the workspace roots"),
        ("echo hi > .git/hooks/pre-commit", "protected .git"),
        ("git log > .git/config", "protected .git"),
        ("echo x >> ../outside", "outside the workspace roots"),
    ],
)
def test_writes_the_confinement_would_refuse_are_refused(
    guard: CommandGuard, command: str, fragment: str
) -> None:
    verdict = guard.assess(command)
    assert verdict.refusal and fragment in verdict.refusal


@pytest.mark.parametrize(
    ("program", "args", "fragment"),
    [
        ("tree", ["-o", "listing.txt"], "tree -o"),
        ("tree", ["-dR"], "tree -R"),
        ("rg", ["--pre=sh", "x"], "rg --pre"),
        ("rg", ["--pr", "sh", "x"], "rg --pre"),
        ("rg", ["-iz", "x"], "rg -z"),
        ("sort", ["-k", "1", "--compress=gzip"], "sort --compress-program"),
    ],
)
def test_unsafe_options_are_found_under_every_spelling(
    program: str, args: list[str], fragment: str
) -> None:
    verdict, _ = judge_options(PROFILES[program], args, program=program)
    assert any(fragment in reason for reason in verdict.unsafe), verdict


def test_option_values_and_operands_that_name_files_are_reported_as_reads() -> None:
    verdict, operands = judge_options(
        PROFILES["grep"], ["-f", "pats", "-e", "x", "a", "b"], program="grep"
    )
    assert verdict.reads == ("pats", "a", "b") and operands == 2
    verdict, _ = judge_options(PROFILES["grep"], ["needle", "a.txt"], program="grep")
    assert verdict.reads == ("a.txt",)


@pytest.mark.parametrize(
    ("command", "walks"),
    [
        ("grep -r TODO src", ("src",)),
        ("grep -rn TODO", (".",)),  # grep -r without a file reads the current directory
        ("grep TODO -R .", (".",)),
        ("grep --recur TODO src", ("src",)),  # getopt takes a unique prefix
        ("grep -d recurse TODO src", ("src",)),
        ("grep --directories=rec TODO src", ("src",)),
        ("grep -r -e TODO src src/app.py", ("src",)),  # a file is read, not walked
        ("diff -r src src", ("src",)),
        ("git diff --no-index src src/app.py", ("src",)),
        ("grep TODO src/app.py", ()),
        ("grep -d skip TODO src", ()),
        ("ls -R src", ()),  # names, not contents
    ],
)
def test_commands_that_read_every_file_below_a_directory_name_it(
    guard: CommandGuard, workspace: Path, command: str, walks: tuple[str, ...]
) -> None:
    (workspace / "src" / "app.py").write_text("# TODO")
    verdict = guard.assess(command)
    assert verdict.walks == tuple(os.path.realpath(workspace / w) for w in walks), verdict


def test_a_path_under_proc_is_never_read_as_the_kernel_sees_it(guard: CommandGuard) -> None:
    # /proc/self/cwd is the kernel's working directory to the judge, the command's own to
    # the command: whatever the judge found there says nothing about what the command reads.
    for command in ("grep -r KEY /proc/self/cwd", "cat /proc/thread-self/cwd/.env"):
        verdict = guard.assess(command)
        assert any("/proc" in reason for reason in verdict.unproven), verdict


def test_rg_reads_every_file_below_its_directories_or_the_current_one() -> None:
    # rg is not installed on every machine: its profile is read directly.
    verdict, _ = judge_options(PROFILES["rg"], ["TODO"], program="rg")
    assert verdict.walks and verdict.reads == (".",)
    verdict, _ = judge_options(PROFILES["rg"], ["TODO", "src"], program="rg")
    assert verdict.walks and verdict.reads == ("src",)


def test_a_workspace_program_named_like_an_allowed_one_is_not_allowed(
    guard: CommandGuard, workspace: Path
) -> None:
    fake = workspace / "bin" / "cat"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\ntouch pwned\n")
    fake.chmod(0o755)
    for command in ("bin/cat x", "./bin/cat x", f"{fake} x"):
        verdict = guard.assess(command)
        assert not verdict.allowed
        assert any("by path" in reason for reason in verdict.unproven)


def test_the_search_path_never_includes_the_workspace(workspace: Path, tmp_path: Path) -> None:
    tools = workspace / "bin"
    tools.mkdir()
    (tools / "cat").write_text("#!/bin/sh\n")
    path = system_search_path(f"{tools}:.:relative:/usr/bin", [workspace])
    assert str(tools) not in path and "." not in path and "relative" not in path
    assert os.path.realpath("/usr/bin") in path


def test_programs_are_resolved_before_they_are_judged(guard: CommandGuard) -> None:
    verdict = guard.assess("ls | wc -l")
    assert verdict.programs and all(os.path.isabs(p) for p in verdict.programs)


@pytest.mark.parametrize(
    "words",
    [
        '"a\nb"',
        '"a\\"b" "c\\\\d" "e\\f" "\\$x" "\\`y\\`"',
        'python3 -c "print(\\"hi\\")"',
        '"  spaced  " "" "tab\there"',
        '"a"b\'c\'"d"',
        '"one\ntwo\n\nthree"',
        "-c 'single \\\" kept'",
        '"new\\\nline"',
        '"中文 \\"引号\\""',
    ],
)
def test_the_words_a_program_gets_are_the_words_bash_gives_it(words: str) -> None:
    # The confined command is started from the parser's words, so they must be bash's own.
    bash = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {words}"], capture_output=True, check=True
    ).stdout.decode()
    expected = tuple(bash.split("\0")[:-1])
    (command,) = PARSER.parse(f"printf {words}").commands
    assert command.argv[1:] == expected


@pytest.mark.parametrize(
    ("subcommand", "args", "limits"),
    [
        ("log", ["--oneline", "-5", "--stat"], None),  # names and messages only
        ("log", ["-p"], ()),
        ("log", ["-3", "--patch", "main"], ()),
        ("log", ["-S", "API_KEY", "--oneline"], ()),  # a pickaxe tells what a file held
        ("log", ["--check"], ()),  # an option not known harmless
        ("log", ["-p", "--", "src", "docs"], ("src", "docs")),
        ("log", ["-p", "src"], ()),  # only literal paths after -- limit it
        ("log", ["-p", "--", "*.env"], ()),  # git reads it as a glob
        ("log", ["-p", "--", ":(exclude).env"], ()),  # magic
        ("log", ["-p", "--follow", "--", "notes.txt"], ()),  # follows renames out of it
        ("log", ["-p", "--full-diff", "--", "a.txt"], ()),
        ("show", ["3abd730", "--", "a.txt"], ()),  # a blob id: its paths are ignored
        ("show", [], ()),
        ("show", ["HEAD:src/app.py"], ()),  # screened as the object it names (a file: its path)
        ("show", ["HEAD@{1:1}"], ()),  # braces: a revision, not a file
        ("show", ["--stat", "HEAD"], ()),  # HEAD could be a tag of a file's object
        ("show", ["-U", "HEAD:.env", "--", "src"], ()),  # a file: its paths are ignored
        ("diff", [], ()),
        ("diff", ["--name-only", "HEAD~1"], None),
        ("diff", ["--stat", "-p"], ()),
        ("status", [], None),
        ("status", ["-v"], ()),
        ("status", ["-bv"], ()),
        ("status", ["--verb"], ()),
        ("status", ["--v"], ()),
        ("status", ["--short", "-b"], None),
    ],
)
def test_git_commands_that_print_tracked_contents_are_told_apart(
    subcommand: str, args: list[str], limits: tuple[str, ...] | None
) -> None:
    from providers.sandbox.git_history import shown_history

    assert shown_history(subcommand, args) == limits
    if limits:
        assert shown_history(subcommand, args, ["--icase-pathspecs"]) == ()


@pytest.mark.parametrize(
    ("args", "revisions"),
    [
        ([], ()),
        (["--cached"], ("HEAD",)),
        (["-U3", "-w", "main", "--", "src"], ("main",)),
        (["HEAD~2..HEAD"], ("HEAD~2..HEAD",)),
        (["--merge-base", "main"], None),  # compares something it does not name
        (["--no-index", "a", "b"], None),
    ],
)
def test_a_git_diff_reads_the_revisions_it_names_and_the_index(
    args: list[str], revisions: tuple[str, ...] | None
) -> None:
    from providers.sandbox.git_history import compared_revisions

    assert compared_revisions("diff", args) == revisions
    assert compared_revisions("log", args) is None


def test_a_git_show_of_names_only_is_told_apart() -> None:
    from providers.sandbox.git_history import names_only_show

    assert names_only_show(["--stat", "HEAD"]) and names_only_show(["--name-only"])
    assert not names_only_show(["HEAD"])  # a patch
    assert not names_only_show(["--stat", "-p", "HEAD"])
    assert not names_only_show(["--stat", "HEAD", "--", "src"])
