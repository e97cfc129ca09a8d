/* loom_lang.h - the language's subcommands of the loom command (loom_lang.c). */
#ifndef LOOM_TOOLS_LOOM_LANG_H
#define LOOM_TOOLS_LOOM_LANG_H
/* argv[0] is the subcommand ("check", "schedules", "interp", "run", "tune"); the exit status. */
int loom_lang_main(int argc, char **argv);
#endif
