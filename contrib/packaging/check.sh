#!/bin/bash
# The two ways onto a host, checked on Debian 12 with Debian's rpm and rpmlint:
#
#   bash contrib/packaging/check.sh      (after cargo build --features ostree)
#
#  1. make install the spec's way (`make generated`, then `make install PREFIX=/usr`) and
#     README's (`make`, then `make install PREFIX=/usr`), each into a DESTDIR, with the built
#     binary (BIN, by default target/debug/hostpull, which tests/run.sh has built; a release
#     build would only take longer); every path the installed units name is installed;
#  2. the installed example profile is valid: `hostpull plan --profile os` (no network);
#  3. the spec's %files are exactly what make install installed: rpmbuild packages that
#     tree (-bb --short-circuit: no cargo, no %install) and fails on a file installed but
#     not listed or listed but not installed; then the packages' file lists (files and
#     directories, %ghost left out) equal the tree, but for the directories above them
#     that the distribution owns (/usr/share/man/man1, ...);
#  4. mutation: a stray installed file, and a listed file not installed, each fail step 3;
#  5. rpmbuild -bs makes a source RPM from a tarball of the tree (git archive);
#  6. rpmlint finds no error in the spec, the source RPM and the binary RPMs.
#
# Debian's rpm lacks Fedora's macros for these paths: fedora.macros gives their values.
# Last line: "packaging: N passed, N failed". Exit status 1 on any failure.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
spec=$here/hostpull.spec
BIN=$(realpath -m "${BIN:-$top/target/debug/hostpull}")

pass=0
fail=0
ok() { echo "ok   $*"; pass=$((pass + 1)); }
bad() { echo "FAIL $*"; fail=$((fail + 1)); }
summary() {
    echo "packaging: $pass passed, $fail failed"
    [[ $fail -eq 0 ]]
    exit
}
for tool in make rpmbuild rpmlint; do
    command -v $tool >/dev/null || { bad "no $tool (tests/rig.sh install brings it)"; summary; }
done
[[ -x $BIN ]] || { bad "no $BIN: build it first (cargo build --features ostree)"; summary; }
version=$(sed -n 's/^Version: *//p' "$spec")
cargo_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$top/Cargo.toml" | head -1)
[[ $version == "$cargo_version" ]] && ok "the spec's Version is Cargo.toml's ($version)" ||
    bad "the spec's Version $version is not Cargo.toml's $cargo_version"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rpmbuild=(rpmbuild --nodeps --load "$here/fedora.macros" --define "_topdir $work/rpm"
          --define "_build_id_links none" --define "_binary_payload w0.ufdio")

# --- 1. make install, the two ways the project says -------------------------------------
# The spec's: `%make_build generated ARGS` in %build, then `%make_install ARGS` in
# %install, each with the spec's own ARGS (%{_prefix} is /usr). README's (an admin's):
# `make`, then `make install PREFIX=/usr` as README has it. PREFIX reaches the second step
# only; BIN (the built binary) and OUT are added to both, and README's `make` gets
# CARGO=true for its release build, which would only take longer.
spec_args() { sed -n "s/^%$1 //p" "$spec" | sed 's/%{_prefix}/\/usr/g'; }
read -ra spec_build <<<"$(spec_args make_build)"
read -ra spec_install <<<"$(spec_args make_install)"
read -ra readme_install <<<"$(sed -n 's/^sudo make install \([^&]*\) &&.*/\1/p' "$top/README.md")"
root=$work/root
admin=$work/admin
steps() { # NAME DESTDIR [FIRST-STEP-ARGS...] -- [INSTALL-ARGS...]
    local name=$1 dest=$2 first=() second=()
    shift 2
    while [[ $1 != -- ]]; do first+=("$1"); shift; done
    shift
    second=("$@")
    if make -s -C "$top" "${first[@]}" BIN="$BIN" OUT="$dest.out" >"$work/make.log" 2>&1 &&
        make -s -C "$top" install "${second[@]}" DESTDIR="$dest" BIN="$BIN" OUT="$dest.out" \
            >>"$work/make.log" 2>&1; then
        ok "$name: make ${first[*]}, then make install ${second[*]} ($(find "$dest" -type f | wc -l) files)"
    else
        sed 's/^/  /' "$work/make.log"
        bad "$name: make ${first[*]}, then make install ${second[*]}"
        summary
    fi
}
# units_resolve NAME DESTDIR PREFIX: every path the installed units name is installed:
# the ExecStart= binary (executable), each Documentation= file:// and man: page, and
# any other /usr/... word.
units_resolve() {
    local name=$1 dest=$2 prefix=$3 unit word page sec path missing=()
    for unit in "$dest$prefix"/lib/systemd/system/*; do
        for word in $(grep -v '^#' "$unit" | grep -oE '(=| )(file://)?/[^ ]+|man:[^ ]+'); do
            word=${word#[= ]}
            case $word in
            man:*) page=${word#man:} && sec=${page##*(} && sec=${sec%)}
                   path=$prefix/share/man/man$sec/${page%(*}.$sec ;;
            file://*) path=${word#file://} ;;
            *) path=$word ;;
            esac
            [[ -e $dest$path ]] || missing+=("${unit##*/}: $word")
        done
        word=$(sed -n 's/^ExecStart=[-@:+!]*\([^ ]*\).*/\1/p' "$unit")
        [[ -z $word || -x $dest$word ]] || missing+=("${unit##*/}: ExecStart=$word (not executable)")
    done
    if [[ ${#missing[@]} -eq 0 ]]; then
        ok "$name: every path the installed units name is installed under DESTDIR"
    else
        printf '  not installed: %s\n' "${missing[@]}"
        bad "$name: the installed units name paths that are not installed"
    fi
}
if [[ ${#spec_build[@]} -eq 0 || ${#spec_install[@]} -eq 0 || ${#readme_install[@]} -eq 0 ]]; then
    bad "no %make_build and %make_install in the spec, or no 'sudo make install' in README"
    summary
fi
steps "the spec" "$root" "${spec_build[@]}" -- "${spec_install[@]}"
units_resolve "the spec" "$root" /usr
steps "README" "$admin" CARGO=true -- "${readme_install[@]}"
units_resolve "README" "$admin" /usr
# --- 2. the example profile ------------------------------------------------------------
mkdir -p "$work/plan/etc/hostpull/pulls.d"
cp "$root/usr/share/doc/hostpull/examples/pulls.d/os.toml" "$work/plan/etc/hostpull/pulls.d/"
if "$root/usr/bin/hostpull" plan --profile os --sandbox none --policy /etc/containers/policy.json \
    --config-root "$work/plan" >"$work/plan.log" 2>&1; then
    ok "the example profile plans: $(head -1 "$work/plan.log" | tr -s ' ')"
else
    sed 's/^/  /' "$work/plan.log"
    bad "hostpull plan --profile os with the example profile"
fi

# --- 3. %files = what make install installed ---------------------------------------------
# package BUILDROOT [-bl]: rpmbuild's file check on a copy of the tree, plus the license
# file that %license would copy there in a full build.
package() {
    local br=$work/buildroot mode=${2:--bb}
    rm -rf "$br" "$work/rpm" "$work/build" && cp -al "$1" "$br" || return 1
    mkdir -p "$work/build" "$br/usr/share/licenses/hostpull"
    # A stand-in for what %%cargo_license writes (the crates and their licenses).
    echo "stand-in for the output of %cargo_license" |
        tee "$work/build/LICENSE.dependencies" >"$br/usr/share/licenses/hostpull/LICENSE.dependencies"
    (cd "$work/build" && "${rpmbuild[@]}" "$mode" --short-circuit --build-in-place --noclean \
        --define "buildroot $br" "$spec") >"$work/rpmbuild.log" 2>&1
}
if package "$root"; then
    ok "rpmbuild packages the tree: no file unlisted, none missing"
    mkdir -p "$work/rpms" && cp "$work"/rpm/RPMS/*/*.rpm "$work/rpms/" # for rpmlint (step 6)
else
    grep -A20 -E 'error|Installed \(but unpackaged\)' "$work/rpmbuild.log" | sed 's/^/  /' | head -30
    bad "rpmbuild -bb --short-circuit on the installed tree"
    summary
fi
# Every path the packages list (but %ghost), and every path of the tree: equal, but for
# directories of the tree that only lead to listed paths.
rpm -qp --qf '[%{FILEFLAGS:fflags}|%{FILENAMES}\n]' "$work"/rpm/RPMS/*/*.rpm |
    awk -F'|' '$1 !~ /g/ { print $2 }' | sort >"$work/listed"
(cd "$work/buildroot" && find . -mindepth 1 | sed 's/^\.//' | sort) >"$work/tree"
unlisted=$(comm -13 "$work/listed" "$work/tree" | while read -r p; do
    [[ -d $work/buildroot$p ]] && grep -q "^$p/" "$work/listed" && continue
    echo "$p"
done)
missing=$(comm -23 "$work/listed" "$work/tree")
if [[ -z $unlisted && -z $missing ]]; then
    ok "the packages list exactly the tree ($(wc -l <"$work/listed") paths, directories included)"
else
    [[ -n $unlisted ]] && echo "  installed, not in %files: $unlisted"
    [[ -n $missing ]] && echo "  in %files, not installed: $missing"
    bad "the packages' file lists and the installed tree differ"
fi

# --- 4. mutation ------------------------------------------------------------------------
cp -al "$root" "$work/stray" && touch "$work/stray/usr/share/doc/hostpull/stray.md"
if package "$work/stray" -bl; then
    bad "a stray installed file passes the file check: it does not compare the sets"
elif grep -q '/usr/share/doc/hostpull/stray.md' "$work/rpmbuild.log"; then
    ok "mutant: a stray installed file fails the check, named"
else
    sed 's/^/  /' "$work/rpmbuild.log" | tail -10
    bad "mutant: a stray installed file fails, but not naming it"
fi
cp -al "$root" "$work/short" && rm "$work/short/usr/share/fish/vendor_completions.d/hostpull.fish"
if package "$work/short" -bl; then
    bad "a listed file not installed passes the file check"
elif grep -q 'File not found: .*hostpull.fish' "$work/rpmbuild.log"; then
    ok "mutant: a listed file not installed fails the check, named"
else
    sed 's/^/  /' "$work/rpmbuild.log" | tail -10
    bad "mutant: a missing file fails, but not naming it"
fi

# --- 5. source RPM from a tarball of the tree -----------------------------------------------
mkdir -p "$work/sources"
tarball=$work/sources/hostpull-$version.tar.gz
if git -C "$top" rev-parse --git-dir >/dev/null 2>&1; then
    # HEAD plus uncommitted changes of tracked files, as a commit (stash create).
    tree=$(git -C "$top" stash create)
    git -C "$top" archive --prefix="hostpull-$version/" -o "$tarball" "${tree:-HEAD}"
else
    tar -C "$(dirname "$top")" --exclude=target --transform "s|^$(basename "$top")|hostpull-$version|" \
        -czf "$tarball" "$(basename "$top")"
fi
if "${rpmbuild[@]}" -bs --define "_sourcedir $work/sources" "$spec" >"$work/srpm.log" 2>&1 &&
    srpm=$(ls "$work"/rpm/SRPMS/hostpull-"$version"-*.src.rpm 2>/dev/null) &&
    grep -qx "hostpull-$version.tar.gz" <<<"$(rpm -qpl "$srpm")"; then
    ok "rpmbuild -bs: $(basename "$srpm") from a tarball of the tree"
else
    sed 's/^/  /' "$work/srpm.log"
    bad "rpmbuild -bs"
fi

# --- 6. rpmlint -------------------------------------------------------------------------------
# The spec, the source RPM and the binary RPMs of step 3, in one session (a filter of
# hostpull.rpmlintrc that no package needs is an error). hostpull.rpmlintrc filters what
# Debian's rpmlint 2.4 reports but Fedora's guidelines or a newer rpmlint do not, each
# with its reason. Warnings are shown; some come from this check itself: Debian's rpm
# has no %systemd_post and friends (percent-in-%post), the binary is a debug build
# (unstripped), and -bb --short-circuit skips the brp scripts that compress man pages.
lint() { # FILE...: no errors (warnings shown)
    local out
    out=$(rpmlint -r "$here/hostpull.rpmlintrc" "$@" 2>&1)
    if grep -qE ' 0 errors, ' <<<"$out"; then
        ok "rpmlint $(printf '%s ' "${@##*/}"): $(grep -oE '[0-9]+ errors, [0-9]+ warnings' <<<"$out")"
        grep -E ': W: ' <<<"$out" | sed 's/^/       /'
    else
        sed 's/^/  /' <<<"$out"
        bad "rpmlint $(printf '%s ' "${@##*/}")"
    fi
}
lint "$spec" ${srpm:+"$srpm"} "$work"/rpms/*.rpm

summary
