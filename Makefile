# Build and install hostpull into FHS places.
#
#   make                                  cargo build --release, then the man pages,
#                                         completions and SELinux policy package
#   make install DESTDIR=... PREFIX=/usr  copy them into place, and write the units for
#                                         this PREFIX; builds nothing that exists (a
#                                         packager's %install gives BIN=)
#
# Nothing goes to /etc but the empty /etc/hostpull/pulls.d/ a package must own; the
# vendor directories are /usr/lib/hostpull/{config.d,pulls.d}/ (hostpull reads /usr/lib,
# /etc and /run whatever PREFIX is). contrib/packaging/hostpull.spec lists the same set,
# and contrib/packaging/check.sh checks that it does.

PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
# hostpull finds its ostree importer in ../libexec from its own directory.
LIBEXECDIR = $(BINDIR)/../libexec
DATADIR ?= $(PREFIX)/share
MANDIR ?= $(DATADIR)/man
DOCDIR ?= $(DATADIR)/doc/hostpull
UNITDIR ?= $(PREFIX)/lib/systemd/system
BASHCOMPDIR ?= $(DATADIR)/bash-completion/completions
ZSHCOMPDIR ?= $(DATADIR)/zsh/site-functions
FISHCOMPDIR ?= $(DATADIR)/fish/vendor_completions.d
# Where selinux-policy packaging puts a module and its interface (Fedora's
# SELinux/IndependentPolicy, as usbguard-selinux and cockpit-selinux do).
SELINUXTYPE ?= targeted
SELINUXDIR ?= $(DATADIR)/selinux
VENDORDIR ?= /usr/lib/hostpull
SYSCONFDIR ?= /etc
INSTALL ?= install

CARGO ?= cargo
CARGO_FEATURES ?= ostree
BIN ?= target/release/hostpull
# The ostree import's own program (with the ostree feature), built beside BIN.
IMPORTER ?= $(dir $(BIN))hostpull-ostree-import
# Generated files: man page, completions, units, policy package.
OUT ?= target/dist
# The policy is built with the distribution's devel Makefile (selinux-policy-devel,
# Debian's selinux-policy-dev), from SELINUX_SRC (selinux/check.sh builds mutants
# through the same rule).
SELINUX_DEVEL ?= /usr/share/selinux/devel/Makefile
SELINUX_SRC ?= selinux

UNITS := hostpull.slice hostpull-pull@.service hostpull-pull@.timer
DOCS := $(wildcard docs/*.md) docs/progress-v0.schema.json
# hostpull(1) and a page per verb (`hostpull man VERB`).
VERBS := pull plan rebase prune man completions
MANPAGES := hostpull.1 $(addprefix hostpull-,$(addsuffix .1,$(VERBS)))
GENERATED := $(addprefix $(OUT)/,$(MANPAGES)) $(OUT)/hostpull.bash $(OUT)/_hostpull \
	$(OUT)/hostpull.fish $(OUT)/selinux/hostpull.pp.bz2

all: bin
	$(MAKE) generated

bin:
	$(CARGO) build --release --locked --features "$(CARGO_FEATURES)"

generated: $(GENERATED)

$(BIN):
	@echo "make: no $(BIN): run make first, or give BIN=PATH-TO-hostpull" >&2; exit 1

$(OUT)/hostpull.1: $(BIN)
	@mkdir -p $(@D)
	$(BIN) man >$@.tmp && mv $@.tmp $@
$(OUT)/hostpull-%.1: $(BIN)
	@mkdir -p $(@D)
	$(BIN) man $* >$@.tmp && mv $@.tmp $@
$(OUT)/hostpull.bash: $(BIN)
	@mkdir -p $(@D)
	$(BIN) completions bash >$@.tmp && mv $@.tmp $@
$(OUT)/_hostpull: $(BIN)
	@mkdir -p $(@D)
	$(BIN) completions zsh >$@.tmp && mv $@.tmp $@
$(OUT)/hostpull.fish: $(BIN)
	@mkdir -p $(@D)
	$(BIN) completions fish >$@.tmp && mv $@.tmp $@

# The devel Makefile must not see our command line (PREFIX= and friends): empty MAKEFLAGS.
selinux-pp: $(OUT)/selinux/hostpull.pp
$(OUT)/selinux/hostpull.pp: $(SELINUX_SRC)/hostpull.te $(SELINUX_SRC)/hostpull.if $(SELINUX_SRC)/hostpull.fc
	rm -rf $(@D) && mkdir -p $(@D) && cp $^ $(@D)/
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C $(@D) -f $(SELINUX_DEVEL) hostpull.pp >$(@D)/build.log 2>&1 \
		|| { cat $(@D)/build.log >&2; exit 1; }
$(OUT)/selinux/hostpull.pp.bz2: $(OUT)/selinux/hostpull.pp
	bzip2 -9 -c $< >$@.tmp && mv $@.tmp $@

install: $(BIN) $(GENERATED)
	$(INSTALL) -D -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/hostpull
ifneq ($(filter ostree,$(CARGO_FEATURES)),)
	$(INSTALL) -D -m 0755 $(IMPORTER) $(DESTDIR)$(LIBEXECDIR)/hostpull-ostree-import
endif
	$(INSTALL) -d -m 0755 $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)/man1
# The units name /usr/bin/hostpull and /usr/share/doc/hostpull: written here, with
# install's BINDIR and DOCDIR, as `make` or `make generated` never knew the PREFIX
# given to install (README's and the spec's two steps).
	for u in $(UNITS); do \
		sed -e 's|/usr/bin/hostpull|$(BINDIR)/hostpull|g' -e 's|/usr/share/doc/hostpull|$(DOCDIR)|g' \
			systemd/$$u >$(DESTDIR)$(UNITDIR)/$$u.tmp && chmod 0644 $(DESTDIR)$(UNITDIR)/$$u.tmp && \
			mv $(DESTDIR)$(UNITDIR)/$$u.tmp $(DESTDIR)$(UNITDIR)/$$u || exit 1; \
	done
	$(INSTALL) -m 0644 $(addprefix $(OUT)/,$(MANPAGES)) $(DESTDIR)$(MANDIR)/man1/
	$(INSTALL) -D -m 0644 $(OUT)/hostpull.bash $(DESTDIR)$(BASHCOMPDIR)/hostpull
	$(INSTALL) -D -m 0644 $(OUT)/_hostpull $(DESTDIR)$(ZSHCOMPDIR)/_hostpull
	$(INSTALL) -D -m 0644 $(OUT)/hostpull.fish $(DESTDIR)$(FISHCOMPDIR)/hostpull.fish
	$(INSTALL) -D -m 0644 $(OUT)/selinux/hostpull.pp.bz2 $(DESTDIR)$(SELINUXDIR)/packages/$(SELINUXTYPE)/hostpull.pp.bz2
	$(INSTALL) -D -m 0644 selinux/hostpull.if $(DESTDIR)$(SELINUXDIR)/devel/include/distributed/hostpull.if
	$(INSTALL) -D -m 0644 README.md $(DESTDIR)$(DOCDIR)/README.md
	$(INSTALL) -d -m 0755 $(DESTDIR)$(DOCDIR)/docs
	$(INSTALL) -m 0644 $(DOCS) $(DESTDIR)$(DOCDIR)/docs/
	$(INSTALL) -D -m 0644 contrib/examples/pulls.d/os.toml $(DESTDIR)$(DOCDIR)/examples/pulls.d/os.toml
	$(INSTALL) -d -m 0755 $(DESTDIR)$(VENDORDIR)/config.d $(DESTDIR)$(VENDORDIR)/pulls.d
	$(INSTALL) -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/hostpull/pulls.d

clean:
	rm -rf $(OUT)

.PHONY: all bin generated selinux-pp install clean
