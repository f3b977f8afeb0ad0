# rdmafs: build and install everything (GNU make; Go, gcc or clang, and the
# system's rdma-core headers: scripts/setup.sh installs them on Debian).
#
#   make                   build/rdmafs and both drop-in libraries
#   make install           into $(DESTDIR)$(PREFIX) (PREFIX=/usr/local):
#                            bin/rdmafs
#                            lib/rdmafs/libibverbs.so.1, librdmacm.so.1
#                              (off the loader's path: they never shadow the
#                              system's; rdmafs exec finds them next to
#                              bin/ and puts them first for its program)
#                            share/man/man8/rdmafs.8, share/man/man5/rdmafs.5
#                            share/bash-completion/completions/rdmafs
#                            lib/systemd/system/rdmafs@.service
#   make uninstall         remove exactly those files
#   make dist              regenerate dist/ (man pages, completion) from the
#                          command; cmd/rdmafs's tests fail while it is stale
#   make clean
#
# The binary is built with -trimpath: an installed rdmafs must not fall
# back on the source tree's libraries (exec's third rule) when its own are
# missing, and takes its libraries from PREFIX/lib/rdmafs only because that
# is ../lib/rdmafs from PREFIX/bin (exec's second rule), so BINDIR and
# LIBDIR are not settable apart from PREFIX.

PREFIX  ?= /usr/local
DESTDIR ?=
GO      ?= go

BINDIR    := $(PREFIX)/bin
LIBDIR    := $(PREFIX)/lib/rdmafs
MANDIR    ?= $(PREFIX)/share/man
COMPDIR   ?= $(PREFIX)/share/bash-completion/completions
UNITDIR   ?= $(PREFIX)/lib/systemd/system

INSTALLED := $(BINDIR)/rdmafs \
	$(LIBDIR)/libibverbs.so.1 $(LIBDIR)/libibverbs.so \
	$(LIBDIR)/librdmacm.so.1 $(LIBDIR)/librdmacm.so \
	$(MANDIR)/man8/rdmafs.8 $(MANDIR)/man5/rdmafs.5 \
	$(COMPDIR)/rdmafs $(UNITDIR)/rdmafs@.service

.PHONY: all build/rdmafs libs install uninstall dist clean

all: build/rdmafs libs

# Go decides what is stale itself.
build/rdmafs:
	$(GO) build -trimpath -o $@ ./cmd/rdmafs

libs:
	$(MAKE) -C libibverbs
	$(MAKE) -C librdmacm

install: all
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(MANDIR)/man5 \
		$(DESTDIR)$(COMPDIR) $(DESTDIR)$(UNITDIR)
	install -m 0755 build/rdmafs $(DESTDIR)$(BINDIR)/rdmafs
	$(MAKE) -C libibverbs install DESTDIR=$(DESTDIR) LIBDIR=$(LIBDIR)
	$(MAKE) -C librdmacm install DESTDIR=$(DESTDIR) LIBDIR=$(LIBDIR)
	install -m 0644 dist/rdmafs.8 $(DESTDIR)$(MANDIR)/man8/rdmafs.8
	install -m 0644 dist/rdmafs.5 $(DESTDIR)$(MANDIR)/man5/rdmafs.5
	install -m 0644 dist/rdmafs.bash $(DESTDIR)$(COMPDIR)/rdmafs
	sed 's|@BINDIR@|$(BINDIR)|g' dist/rdmafs@.service.in > $(DESTDIR)$(UNITDIR)/rdmafs@.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/rdmafs@.service

# Only what install put there; the private library directory goes too when
# nothing else is in it.
uninstall:
	rm -f $(addprefix $(DESTDIR),$(INSTALLED))
	-rmdir $(DESTDIR)$(LIBDIR) 2>/dev/null

dist: build/rdmafs
	build/rdmafs help --man 8 > dist/rdmafs.8
	build/rdmafs help --man 5 > dist/rdmafs.5
	build/rdmafs help --completion > dist/rdmafs.bash

clean:
	rm -rf build
	$(MAKE) -C libibverbs clean
	$(MAKE) -C librdmacm clean
