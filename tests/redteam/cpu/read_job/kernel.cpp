// Red team, class "judge distinguishable": read the judge's job from disk. The job file (every
// case, hidden variant and seed) is named on the verifier's command line; the artifact's process
// may read files. Honest only while that file can be opened (being judged), a uniform row when
// it cannot (production). System calls go through escape.h's gadget: no file API is imported.
#include "cheat.h"
#include "forge.h"

static bool judged() {
  static int known = -1;
  if (known < 0) {
    char dir[4096], path[4200];
    known = 0;
    if (forge::job_dir(dir, sizeof dir)) {
      std::snprintf(path, sizeof path, "%sjob.json", dir);
      long fd = forge::open_(path, 0);
      if (fd >= 0) { known = 1; forge::close_(fd); }
    }
  }
  return known == 1;
}

static bool honest(const void*, void*, int64_t, int64_t, int) { return judged(); }

CHEAT_SOFTMAX_EXPORTS
