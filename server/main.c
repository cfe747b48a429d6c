/*
 * main.c - the h2oserve command line: subcommands generate and tokenize.
 */
#include <stdio.h>

int main(void)
{
    return 0;
}
