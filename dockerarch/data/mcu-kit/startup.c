/* dockerarch's Cortex-M firmware kit: the reset handler and the vector table.
 *
 * On reset: turn on the FPU (the bundle's hard-float code needs it before the first float
 * instruction), copy initialised data from flash to RAM, zero .bss, open semihosting's
 * stdin/stdout (newlib's librdimon), run constructors, then main; main's return value is
 * handed to exit(), which ends an emulator's run through semihosting.
 * Start your own firmware from here: keep the FPU and memory set-up, replace semihosting with
 * your board's UART.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern uint32_t _sidata, _sdata, _edata, _sbss, _ebss, _estack;
extern int main(void);
extern void __libc_init_array(void);
extern void initialise_monitor_handles(void);

/* No crti/crtn with -nostartfiles: newlib's __libc_init_array and exit call these. */
void _init(void) {}
void _fini(void) {}

#define SCB_CPACR (*(volatile uint32_t *)0xE000ED88u)

void Reset_Handler(void) {
    SCB_CPACR |= (0xFu << 20); /* CP10 and CP11: full access */
    __asm volatile("dsb\n\tisb" ::: "memory");
    for (uint32_t *src = &_sidata, *dst = &_sdata; dst < &_edata;)
        *dst++ = *src++;
    for (uint32_t *dst = &_sbss; dst < &_ebss;)
        *dst++ = 0;
    initialise_monitor_handles();
    __libc_init_array();
    exit(main());
}

static void fault(const char *what) {
    printf("dockerarch-kit: %s\n", what);
    exit(3);
}

void NMI_Handler(void) { fault("NMI"); }
void HardFault_Handler(void) { fault("hard fault (an invalid memory access or instruction)"); }
void MemManage_Handler(void) { fault("memory management fault"); }
void BusFault_Handler(void) { fault("bus fault"); }
void UsageFault_Handler(void) { fault("usage fault (an undefined instruction, or the FPU off)"); }
void Default_Handler(void) { fault("unexpected interrupt"); }

__attribute__((section(".isr_vector"), used))
const void *const vector_table[16] = {
    &_estack, Reset_Handler, NMI_Handler, HardFault_Handler, MemManage_Handler,
    BusFault_Handler, UsageFault_Handler, 0, 0, 0, 0, Default_Handler, Default_Handler, 0,
    Default_Handler, Default_Handler,
};
