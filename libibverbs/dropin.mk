# The build both drop-in libraries share (included by libibverbs/Makefile
# and librdmacm/Makefile, from their own directories). The includer sets:
#
#   NAME          the library: libibverbs or librdmacm (soname NAME.so.1)
#   GEN_DIR       where gen/'s Go package is, relative to the includer
#   GEN_LIB       gen's -lib flag ("" for libibverbs)
#   PROTO_SRC     the C source whose prototypes gen's stubs follow
#   LIB_LDLIBS    what the library links against
#   CTESTS        the C tests of ctest/ that `make check` runs
#   CTEST_LDLIBS  what a ctest links against (besides this build)
#   CTEST_DEPS    what a ctest depends on besides the library
#
# and may add rules after the include (a test built another way, tests/).

CC      ?= cc
GO      ?= go
NM      ?= nm
OBJDUMP ?= objdump
PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib/rdmafs

B ?= build

CFLAGS   ?= -O2 -g
WARN     := -Wall -Wextra -Werror
ifeq ($(SANITIZE),1)
SAN      := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all
endif
ALL_CFLAGS  = $(WARN) $(CFLAGS) -fPIC -D_GNU_SOURCE -I$(MOUNTIO) $(SAN) $(CPPFLAGS)
ALL_LDFLAGS = $(SAN) $(LDFLAGS)

# mountio.c, the file operations on a mount, is libibverbs's source and
# part of every drop-in library; so is rdmafs-text.h, qp/'s words and
# rules, generated.
MOUNTIO := $(GEN_DIR)/..
vpath mountio.c $(MOUNTIO)
SRCS := $(sort $(wildcard *.c) mountio.c)
HDRS := $(wildcard *.h) $(MOUNTIO)/mountio.h $(MOUNTIO)/rdmafs-text.h
OBJS := $(SRCS:%.c=$(B)/%.o)
GEN  := $(B)/gen
LIB  := $(B)/$(NAME).so.1

# The export set to reproduce: the installed library's, or exports.txt.
ifeq ($(origin SYSTEM_LIB),undefined)
SYSTEM_LIB := $(realpath $(shell $(CC) -print-file-name=$(NAME).so.1))
endif
ifneq ($(filter $(abspath $(B))/%,$(SYSTEM_LIB)),)
SYSTEM_LIB :=
endif

.PHONY: all check asan check-asan install clean
.DELETE_ON_ERROR:

all: $(LIB) $(B)/$(NAME).so

$(B) $(B)/ctest:
	mkdir -p $@

$(B)/%.o: %.c $(HDRS) Makefile $(GEN_DIR)/../dropin.mk | $(B)
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(GEN): $(wildcard $(GEN_DIR)/*.go) $(GEN_DIR)/../../go.mod | $(B)
	cd $(GEN_DIR) && $(GO) build -o $(abspath $@) .

ifneq ($(SYSTEM_LIB),)
$(B)/exports.txt: $(SYSTEM_LIB) $(GEN)
	OBJDUMP=$(OBJDUMP) $(GEN) exports $(GEN_LIB) $(SYSTEM_LIB) > $@
else
$(B)/exports.txt: exports.txt | $(B)
	cp exports.txt $@
endif

# What the implementation defines, by the objects' own symbol tables.
$(B)/defined.txt: $(OBJS)
	$(NM) --defined-only $(OBJS) > $@

# The prototypes of the library's headers, as the compiler reads them.
$(B)/protos.txt: Makefile | $(B)
	printf '$(PROTO_SRC)' | \
		$(CC) $(ALL_CFLAGS) -x c -aux-info $@ -fsyntax-only -

$(B)/stubs.stamp: $(B)/exports.txt $(B)/defined.txt $(B)/protos.txt $(GEN)
	$(GEN) stubs $(GEN_LIB) -source "$(or $(SYSTEM_LIB),exports.txt)" \
		-exports $(B)/exports.txt -defined $(B)/defined.txt \
		-protos $(B)/protos.txt -map $(B)/$(NAME).map \
		-stubs $(B)/stubs.c -table $(B)/stubs.tab
	touch $@

$(B)/stubs.c $(B)/$(NAME).map $(B)/stubs.tab: $(B)/stubs.stamp ;

$(B)/stubs.o: $(B)/stubs.c
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(LIB): $(OBJS) $(B)/stubs.o $(B)/$(NAME).map
	$(CC) -shared -o $@ -Wl,-soname,$(NAME).so.1 \
		-Wl,--version-script=$(B)/$(NAME).map -Wl,--no-undefined-version \
		-Wl,-z,defs $(ALL_LDFLAGS) $(OBJS) $(B)/stubs.o $(LIB_LDLIBS)

$(B)/$(NAME).so: $(LIB)
	ln -sf $(NAME).so.1 $@

# The C tests link against this build (and find it first at run time);
# abi_test compares the helpers with the system library when there is one.
TEST_DEFS = -DRDMAFS_TEST_LIB='"$(abspath $(LIB))"' \
	-DRDMAFS_SYSTEM_LIB='"$(SYSTEM_LIB)"'

$(B)/ctest/%: ctest/%.c $(CTEST_DEPS) $(LIB) $(B)/$(NAME).so $(B)/stubs.tab | $(B)/ctest
	$(CC) $(ALL_CFLAGS) $(TEST_DEFS) -I. -I$(B) -o $@ $< \
		-L$(B) -Wl,-rpath,$(abspath $(B)) $(ALL_LDFLAGS) $(CTEST_LDLIBS) -ldl

check: $(CTESTS)
	@for t in $(CTESTS); do \
		echo "== $$t"; \
		LD_LIBRARY_PATH=$(abspath $(B)) $$t || exit 1; \
	done

asan:
	$(MAKE) B=build-asan SANITIZE=1 all

check-asan:
	$(MAKE) B=build-asan SANITIZE=1 check

install: all
	install -d $(DESTDIR)$(LIBDIR)
	install -m 0755 $(LIB) $(DESTDIR)$(LIBDIR)/$(NAME).so.1
	ln -sf $(NAME).so.1 $(DESTDIR)$(LIBDIR)/$(NAME).so

clean:
	rm -rf build build-asan
